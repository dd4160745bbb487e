"""Converts two of the small exported models under this folder to float16 (committed; not run
in CI): ``resnet_tiny`` and ``bert_tiny`` as onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)`` writes them, which is how fp16 models are
usually made: every float tensor and node float16, a Cast at each float input and output.

Run in a scratch environment, not the test environment:

    python -m venv /tmp/fp16-venv
    /tmp/fp16-venv/bin/pip install onnxconverter-common onnx
    /tmp/fp16-venv/bin/python packages/backend-cpu/tests/models/convert_fp16_models.py

The inputs of each converted model are those of its float32 original (manifest.json).
"""

from __future__ import annotations

import os

import onnx
from onnxconverter_common.float16 import convert_float_to_float16

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = ["resnet_tiny", "bert_tiny"]


def main() -> None:
    for name in MODELS:
        model = onnx.load(os.path.join(HERE, f"{name}.onnx"))
        fp16 = convert_float_to_float16(model, keep_io_types=True)
        onnx.checker.check_model(fp16)
        path = os.path.join(HERE, f"{name}_fp16.onnx")
        onnx.save(fp16, path)
        print(f"{path}: {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
