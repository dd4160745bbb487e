"""Exports the full-size models that benchmarks/real_models.py times (random weights, batch 1).

    python -m venv /work/venv-export
    /work/venv-export/bin/pip install torch==2.13.0 torchvision==0.28.0 transformers onnx onnxscript pillow
    /work/venv-export/bin/python benchmarks/export_real_models.py [FOLDER] [--models resnet18,bert_base]
                                                                  [--dynamo]

FOLDER defaults to ~/.cache/nnplug-bench. The models are up to hundreds of MB each and are not
committed. One or more of each family users run (FAMILIES): torchvision's ResNet-18/50,
DenseNet-121, GoogLeNet, Inception v3 (299x299), RegNetY-400MF, ConvNeXt-T, MobileNetV2,
MobileNetV3-Large, EfficientNet-B0, SqueezeNet 1.1 and ShuffleNetV2 at 224x224; its FCN-ResNet50,
LRASPP and DeepLabV3 MobileNetV3 segmentation at 320x320; a ConvTranspose U-Net and a
GroupNorm/InstanceNorm net at 256x256 and 2-layer GRU and LSTM over 100 steps (defined here);
transformers' BERT-base, bert_l4 (BERT-base's widths, 4 layers), DistilBERT, GPT-2 (2 layers,
no cache) and the T5-small encoder at sequence length 128, ViT-B/16 at 224x224, Whisper-tiny's
encoder (30 s of 80 mel bins) and wav2vec2-base (1 s at 16 kHz). All are built from their
constructors or config objects with seeded random weights (nothing is downloaded), exported with
the TorchScript exporter at opset 17. ``--dynamo`` exports the same models with torch's dynamo
exporter (``dynamo=True``) at opset 18 into FOLDER/dynamo instead, so the two exports of a model
can be timed side by side (real_models.py FOLDER/dynamo). The folder gets a manifest.json with
each model's inputs (name, element type, shape, how to draw values), which real_models.py reads;
exporting a subset keeps the other entries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import types

OPSET = 17
DYNAMO_OPSET = 18  # the dynamo exporter's lowest
DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench")
VISION = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0",
          "densenet121", "convnext_tiny", "googlenet", "inception_v3", "regnet_y_400mf",
          "squeezenet1_1", "shufflenet_v2_x1_0"]
SEGMENTATION = ["fcn_resnet50", "lraspp_mobilenet_v3_large", "deeplabv3_mobilenet_v3_large"]
OWN = ["unet_convtranspose", "norm_net", "gru", "lstm"]
TEXT_AUDIO = ["bert_base", "vit_b_16", "bert_l4", "distilbert", "gpt2_l2", "t5_small_encoder",
              "whisper_tiny_encoder", "wav2vec2_base"]
MODELS = VISION + SEGMENTATION + OWN + TEXT_AUDIO
FAMILIES = {
    "cnn": ["resnet18", "resnet50", "densenet121", "googlenet", "inception_v3", "regnet_y_400mf",
            "convnext_tiny"],
    "mobile cnn": ["mobilenet_v2", "mobilenet_v3_large", "efficientnet_b0", "squeezenet1_1",
                   "shufflenet_v2_x1_0"],
    "segmentation": SEGMENTATION,
    "convtranspose / norm": ["unet_convtranspose", "norm_net"],
    "rnn": ["gru", "lstm"],
    "text encoder": ["bert_base", "bert_l4", "distilbert", "vit_b_16"],
    "decoder": ["gpt2_l2"],
    "audio / seq2seq encoder": ["t5_small_encoder", "whisper_tiny_encoder", "wav2vec2_base"],
}
"""The model families users run (issue 29's table); real_models.py reports each family's worst
ratio as well as the geometric mean."""


def import_torchvision():
    """torchvision's models are plain Python, but PyPI's torchvision beside the CPU build of
    torch fails at import while registering its C++ ops ('operator torchvision::nms does not
    exist'). The models need none of those ops, so that one module is skipped then."""
    try:
        import torchvision
    except RuntimeError as e:
        if "torchvision::" not in str(e):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType("torchvision._meta_registrations")
        import torchvision
    return torchvision


def build(name):
    """(module, example inputs, input specs) of one model."""
    import torch

    torch.manual_seed(0)
    if name in VISION:
        tv = import_torchvision()
        kw = {"aux_logits": False, "init_weights": True} if name in ("googlenet", "inception_v3") else {}
        model = getattr(tv.models, name)(weights=None, **kw)
        side = 299 if name == "inception_v3" else 224
        spec = [{"name": "input", "dtype": "float32", "shape": [1, 3, side, side], "kind": "normal"}]
        return model, (torch.randn(1, 3, side, side),), spec
    if name in SEGMENTATION:  # torchvision's segmentation heads at 320x320, the 'out' map
        tv = import_torchvision()
        seg = getattr(tv.models.segmentation, name)(weights=None, weights_backbone=None)

        class Out(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]

        spec = [{"name": "input", "dtype": "float32", "shape": [1, 3, 320, 320], "kind": "normal"}]
        return Out(seg), (torch.randn(1, 3, 320, 320),), spec
    if name in OWN:
        return own_model(name)
    import transformers as tf

    class Wrap(torch.nn.Module):
        def __init__(self, m, keys):
            super().__init__()
            self.m, self.keys = m, keys

        def forward(self, *args):
            return self.m(**dict(zip(self.keys, args)))[0]

    if name in ("bert_base", "bert_l4"):  # BertConfig() is bert-base: 12 layers, hidden 768
        config = tf.BertConfig(num_hidden_layers=12 if name == "bert_base" else 4)
        model = Wrap(tf.BertModel(config), ["input_ids", "attention_mask"])
        seq = 128
        spec = [{"name": "input_ids", "dtype": "int64", "shape": [1, seq], "kind": "ids:30522"},
                {"name": "attention_mask", "dtype": "int64", "shape": [1, seq], "kind": "ones"}]
        return model, (torch.randint(0, 30522, (1, seq)), torch.ones(1, seq, dtype=torch.long)), spec
    if name == "vit_b_16":  # ViTConfig() is ViT-B/16 at 224x224
        model = Wrap(tf.ViTModel(tf.ViTConfig()), ["pixel_values"])
        spec = [{"name": "pixel_values", "dtype": "float32", "shape": [1, 3, 224, 224], "kind": "normal"}]
        return model, (torch.randn(1, 3, 224, 224),), spec
    seq = 128
    ids = [{"name": "input_ids", "dtype": "int64", "shape": [1, seq], "kind": "ids:30000"},
           {"name": "attention_mask", "dtype": "int64", "shape": [1, seq], "kind": "ones"}]
    id_example = (torch.randint(0, 30000, (1, seq)), torch.ones(1, seq, dtype=torch.long))
    if name == "distilbert":  # DistilBertConfig(): 6 layers, hidden 768
        return Wrap(tf.DistilBertModel(tf.DistilBertConfig()), ["input_ids", "attention_mask"]), \
            id_example, ids
    if name == "gpt2_l2":  # GPT-2's widths (768, 12 heads) with 2 layers, no cache
        model = Wrap(tf.GPT2Model(tf.GPT2Config(n_layer=2, use_cache=False)),
                     ["input_ids", "attention_mask"])
        return model, id_example, ids
    if name == "t5_small_encoder":  # T5Config() is t5-small: 6 layers, d_model 512
        return Wrap(tf.T5EncoderModel(tf.T5Config()), ["input_ids", "attention_mask"]), \
            id_example, ids
    if name == "whisper_tiny_encoder":  # whisper-tiny's encoder: 4 layers, d_model 384, 30 s
        config = tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                  decoder_layers=4, decoder_attention_heads=6,
                                  encoder_ffn_dim=1536, decoder_ffn_dim=1536, num_mel_bins=80)
        model = Wrap(tf.WhisperModel(config).get_encoder(), ["input_features"])
        spec = [{"name": "input_features", "dtype": "float32", "shape": [1, 80, 3000], "kind": "normal"}]
        return model, (torch.randn(1, 80, 3000),), spec
    if name == "wav2vec2_base":  # Wav2Vec2Config() is wav2vec2-base: 12 layers; 1 s at 16 kHz
        model = Wrap(tf.Wav2Vec2Model(tf.Wav2Vec2Config()), ["input_values"])
        spec = [{"name": "input_values", "dtype": "float32", "shape": [1, 16000], "kind": "normal"}]
        return model, (torch.randn(1, 16000),), spec
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


def own_model(name):
    """Families torchvision and transformers do not build: a U-Net that upsamples with
    ConvTranspose, a style-transfer-like net of GroupNorm and InstanceNorm, and 2-layer GRU and
    LSTM over 100 steps of 80 features (a speech front-end's shape)."""
    import torch
    from torch import nn

    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                             nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())

    class UNet(nn.Module):
        def __init__(self, c=(32, 64, 128, 256)):
            super().__init__()
            self.down = nn.ModuleList([block(3 if i == 0 else c[i - 1], c[i]) for i in range(len(c))])
            self.up = nn.ModuleList([nn.ConvTranspose2d(c[i], c[i - 1], 2, stride=2)
                                     for i in range(len(c) - 1, 0, -1)])
            self.merge = nn.ModuleList([block(2 * c[i - 1], c[i - 1]) for i in range(len(c) - 1, 0, -1)])
            self.head = nn.Conv2d(c[0], 2, 1)

        def forward(self, x):
            skips = []
            for i, d in enumerate(self.down):
                x = d(x if i == 0 else nn.functional.max_pool2d(x, 2))
                skips.append(x)
            for up, merge, skip in zip(self.up, self.merge, reversed(skips[:-1])):
                x = merge(torch.cat([up(x), skip], 1))
            return self.head(x)

    class NormNet(nn.Module):
        def __init__(self):
            super().__init__()
            layers, c = [], 3
            for o, stride, norm in [(32, 1, "g"), (64, 2, "i"), (128, 2, "g"), (128, 1, "i"),
                                    (128, 1, "g"), (64, 1, "i"), (32, 1, "g")]:
                layers += [nn.Conv2d(c, o, 3, stride, 1),
                           nn.GroupNorm(8, o) if norm == "g" else nn.InstanceNorm2d(o, affine=True),
                           nn.ReLU()]
                c = o
            layers += [nn.Upsample(scale_factor=4, mode="nearest"), nn.Conv2d(c, 3, 3, 1, 1)]
            self.body = nn.Sequential(*layers)

        def forward(self, x):
            return self.body(x)

    class Recurrent(nn.Module):
        def __init__(self, kind):
            super().__init__()
            self.rnn = getattr(nn, kind)(80, 256, num_layers=2, batch_first=True)

        def forward(self, x):
            return self.rnn(x)[0]

    if name in ("gru", "lstm"):
        spec = [{"name": "input", "dtype": "float32", "shape": [1, 100, 80], "kind": "normal"}]
        return Recurrent(name.upper()), (torch.randn(1, 100, 80),), spec
    spec = [{"name": "input", "dtype": "float32", "shape": [1, 3, 256, 256], "kind": "normal"}]
    return (UNet() if name == "unet_convtranspose" else NormNet()), (torch.randn(1, 3, 256, 256),), spec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT_DIR)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--dynamo", action="store_true",
                    help=f"torch's dynamo exporter at opset {DYNAMO_OPSET}, into FOLDER/dynamo")
    args = ap.parse_args(argv)
    import onnx
    import torch

    if args.dynamo:
        args.folder = os.path.join(args.folder, "dynamo")
    os.makedirs(args.folder, exist_ok=True)
    mpath = os.path.join(args.folder, "manifest.json")
    manifest = {}
    if os.path.isfile(mpath):
        with open(mpath) as f:
            manifest = json.load(f)
    failed = 0
    for name in [m for m in args.models.split(",") if m]:
        path = os.path.join(args.folder, f"{name}.onnx")
        try:
            model, example, spec = build(name)
            model.eval()
            with torch.no_grad():
                torch.onnx.export(model, example, path,
                                  opset_version=DYNAMO_OPSET if args.dynamo else OPSET,
                                  input_names=[s["name"] for s in spec], output_names=["output"],
                                  dynamo=args.dynamo, external_data=False)
            onnx.checker.check_model(path)
        except Exception as e:  # noqa: BLE001 - report every model, go on with the next
            print(f"{name}: export failed: {type(e).__name__}: {e}", file=sys.stderr)
            failed += 1
            continue
        family = next((f for f, names in FAMILIES.items() if name in names), "other")
        manifest[name] = {"file": f"{name}.onnx", "inputs": spec, "family": family}
        with open(mpath, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        print(f"{name}: {os.path.getsize(path) / 2**20:.0f} MB -> {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
