"""Creating a Runtime activates every installed backend; the opencl backend must not pay for
pyopencl (tens of milliseconds) until OpenCL is really used."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
import nnplug
rt = nnplug.Runtime()
assert "opencl" in rt.backends, rt.load_errors
print("pyopencl" in sys.modules)
import numpy as np
from onnx import TensorProto, helper
g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
net = rt.load(helper.make_model(g), backends=["opencl"])
print(net.run({"x": np.array([-1, 2, -3, 4], np.float32)})["y"].tolist(), "pyopencl" in sys.modules)
"""


def test_pyopencl_is_imported_on_first_use_not_at_runtime_creation():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "False", out.stdout + out.stderr
    assert lines[1] == "[0.0, 2.0, 0.0, 4.0] True", out.stdout + out.stderr
