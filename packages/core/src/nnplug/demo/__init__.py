"""The bundled demo: SqueezeNet 1.0 from ONNX's "light" model zoo (Apache-2.0, shipped
with the onnx package), whose weights are generated in-graph, with its expected output.

The input is the one ONNX's backend test runner uses for these models: ``arange(n) / n``.
"""

from __future__ import annotations

import os

import numpy as np

HERE = os.path.dirname(__file__)
MODEL = os.path.join(HERE, "squeezenet.onnx")
EXPECTED = os.path.join(HERE, "squeezenet_expected_output.pb")
INPUT_NAME = "data_0"
INPUT_SHAPE = (1, 3, 224, 224)


def demo_input() -> dict[str, np.ndarray]:
    n = int(np.prod(INPUT_SHAPE))
    return {INPUT_NAME: (np.arange(n).reshape(INPUT_SHAPE) / n).astype(np.float32)}


def expected_output() -> np.ndarray:
    import onnx
    from onnx import numpy_helper

    t = onnx.TensorProto()
    with open(EXPECTED, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)
