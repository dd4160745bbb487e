"""Exports the full-size models that benchmarks/real_models.py times (random weights, batch 1).

    python -m venv /work/venv-export
    /work/venv-export/bin/pip install torch==2.13.0 torchvision==0.28.0 transformers onnx onnxscript
    /work/venv-export/bin/python benchmarks/export_real_models.py [FOLDER] [--models resnet18,bert_base]
                                                                  [--dynamo]

FOLDER defaults to ~/.cache/nnplug-bench. The models are hundreds of MB each and are not
committed: torchvision's ResNet-18/50, MobileNetV2, MobileNetV3-Large, EfficientNet-B0,
DenseNet-121 and ConvNeXt-T at 224x224, and transformers' BERT-base at sequence length 128 and
ViT-B/16 at 224x224 (and bert_l4, BERT-base's widths with 4 layers), all built from their
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
          "densenet121", "convnext_tiny"]
MODELS = VISION + ["bert_base", "vit_b_16", "bert_l4"]


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
        model = getattr(tv.models, name)(weights=None)
        spec = [{"name": "input", "dtype": "float32", "shape": [1, 3, 224, 224], "kind": "normal"}]
        return model, (torch.randn(1, 3, 224, 224),), spec
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
    raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")


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
        manifest[name] = {"file": f"{name}.onnx", "inputs": spec}
        with open(mpath, "w") as f:
            json.dump(manifest, f, indent=1, sort_keys=True)
        print(f"{name}: {os.path.getsize(path) / 2**20:.0f} MB -> {path}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
