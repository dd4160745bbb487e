"""Builds the quantized models the tests and benchmarks/quantized_models.py run, from configs with
random weights, with onnxruntime's own quantization tools:

- ``bert_dynamic_int8*.onnx``: a BERT (transformers' BertModel) exported by torch, then
  ``quantize_dynamic`` (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul on every MatMul with
  constant weights). ``_u8pc``: uint8 weights with one zero point per column (``per_channel``).
- ``mobilenetv2_qdq.onnx``: torchvision's MobileNetV2, then ``quantize_static`` in the QDQ format
  (QuantizeLinear / DequantizeLinear around every Conv and Gemm), calibrated on random images;
  with ``--full``, ``resnet18_qdq.onnx`` too, the same way.

    python make_quantized_models.py                 # the small ones the tests read, here (< 2 MB)
    python make_quantized_models.py --full FOLDER   # benchmark sizes: BERT 4 layers of 768 at
                                                    # sequence 128, MobileNetV2 1.0 at 224x224

Needs torch (CPU wheels), torchvision, transformers, onnx, onnxscript and onnxruntime; none of
them is needed to run the tests. Seeded: the same versions make the same files.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch

# torchvision's compiled ops may not match this torch build (its wheel is built for one torch);
# its models are Python, and transformers imports it when installed: register no fake kernels
torch.library.register_fake = lambda *a, **k: (lambda f: f)

HERE = os.path.dirname(os.path.abspath(__file__))


def export(model: torch.nn.Module, args: tuple, names: list[str], path: str) -> None:
    torch.onnx.export(model, args, path, input_names=names, opset_version=18, dynamo=True,
                      external_data=False)


def bert(folder: str, full: bool) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    hidden, layers, heads, inter, seq = (768, 4, 12, 3072, 128) if full else (128, 2, 4, 512, 16)
    config = BertConfig(vocab_size=1000 if not full else 30522, hidden_size=hidden,
                        num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=inter, max_position_embeddings=max(seq, 64),
                        attn_implementation="eager")
    model = BertModel(config).eval()

    class Hidden(torch.nn.Module):  # the last hidden state alone: one output to compare
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.randint(0, config.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = os.path.join(tmp, "bert.onnx")
        export(Hidden(model), (ids, mask), ["input_ids", "attention_mask"], fp32)
        quantize_dynamic(fp32, os.path.join(folder, "bert_dynamic_int8.onnx"),
                         weight_type=QuantType.QInt8)
        if not full:
            quantize_dynamic(fp32, os.path.join(folder, "bert_dynamic_int8_u8pc.onnx"),
                             weight_type=QuantType.QUInt8, per_channel=True)


def qdq_cnns(folder: str, full: bool) -> None:
    import torchvision

    torch.manual_seed(0)
    size = 224 if full else 96
    model = (torchvision.models.mobilenet_v2() if full else
             torchvision.models.mobilenet_v2(width_mult=0.5, num_classes=16))
    qdq_cnn(model, size, os.path.join(folder, "mobilenetv2_qdq.onnx"))
    if full:
        qdq_cnn(torchvision.models.resnet18(), 224, os.path.join(folder, "resnet18_qdq.onnx"))


def qdq_cnn(model: torch.nn.Module, size: int, path: str) -> None:
    """model with random BatchNorm statistics, exported and quantized by quantize_static (QDQ)."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    model = model.eval()
    for m in model.modules():  # random BatchNorm statistics, as a trained model has
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-0.1, 0.1)
            m.running_var.uniform_(0.5, 1.5)

    class Images(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.batches = iter([{"input": rng.standard_normal((1, 3, size, size), np.float32)}
                                 for _ in range(8)])

        def get_next(self):
            return next(self.batches, None)

    with tempfile.TemporaryDirectory() as tmp:
        fp32 = os.path.join(tmp, "model.onnx")
        export(model, (torch.randn(1, 3, size, size),), ["input"], fp32)
        quantize_static(fp32, path, Images(),
                        quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", metavar="FOLDER", help="benchmark sizes, written into FOLDER")
    a = ap.parse_args(argv)
    folder = a.full or HERE
    os.makedirs(folder, exist_ok=True)
    bert(folder, bool(a.full))
    qdq_cnns(folder, bool(a.full))
    for f in sorted(os.listdir(folder)):
        if f.endswith(".onnx"):
            print(f"{f}: {os.path.getsize(os.path.join(folder, f)) / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
