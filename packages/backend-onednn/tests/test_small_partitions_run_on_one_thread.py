"""A partition whose every value (constants included) is small runs on the calling thread
alone, whatever the thread count (plan.c, all_values_small): waking a second thread costs
more than the work, and such partitions sit between other backends' nodes (the transposes
around the LSTMs the CPU backend runs). Checked in a child process by the threads it has:
libgomp starts its pool's thread at the first region of two threads, so small partitions
start none, and a large one does. The answers match onnxruntime's either way."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
import json, os, sys
import numpy as np, nnplug
from onnx import helper, TensorProto

def transpose_model(shape):
    g = helper.make_graph(
        [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
         helper.make_node("Relu", ["t"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

so = nnplug.SessionOptions()
so.intra_op_num_threads = 2
out = {"threads": []}
for shape in json.loads(sys.argv[1]):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    s = nnplug.InferenceSession(transpose_model(shape).SerializeToString(), so,
                                providers=["onednn"])
    got = s.run(None, {"x": x})[0]
    for _ in range(20):
        s.run(None, {"x": x})
    out["threads"].append(len(os.listdir("/proc/self/task")))
    out.setdefault("right", []).append(bool(np.array_equal(got, np.maximum(x.transpose(1, 0, 2), 0))))
    out.setdefault("placed", []).append(sorted(set(s._net.assignment.values())))
print(json.dumps(out))
"""


def threads_after(shapes) -> dict:
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps(shapes)], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("shape", [[100, 1, 80], [4, 50, 160]])
def test_small_partitions_start_no_second_thread(shape):
    got = threads_after([[2, 3, 4], shape, [64, 64, 8]])  # the last: 32768 values, not small
    assert got["placed"] == [["onednn"]] * 3, got
    assert all(got["right"]), got
    small, _, large = got["threads"]
    assert got["threads"][1] == small, got  # still no OpenMP thread after the small ones
    assert large > small, got  # the large partition ran on two: libgomp started its thread
