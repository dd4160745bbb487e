"""NNPLUG_ONEDNN_PROFILE=1 prints one line per step of every run: the node it is for, oneDNN's
primitive kind and implementation or the backend's own step (a Winograd transform), and its
time; without it nothing is printed."""

from __future__ import annotations

import os
import re
import subprocess
import sys

CHILD = r"""
import sys
import numpy as np
from onnx import helper
sys.path.insert(0, sys.argv[1])
from conftest import BACKENDS, graph_model, make_runtime
rng = np.random.default_rng(0)
nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="wconv"),
         helper.make_node("Relu", ["c"], ["r"], name="relu"),
         helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
         helper.make_node("Flatten", ["g"], ["f"], name="flat"),
         helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc")]
x = rng.standard_normal((1, 64, 12, 12)).astype(np.float32)
model = graph_model(nodes, {"x": x}, {"w": rng.standard_normal((64, 64, 3, 3)).astype(np.float32),
                                      "w2": rng.standard_normal((10, 64)).astype(np.float32)})
with make_runtime().load(model, backends=BACKENDS) as net:
    assert set(net.assignment.values()) == {"onednn"}, net.assignment
    for _ in range(2):
        net.run({"x": x})
"""

LINE = re.compile(r"^nnplug-onednn: step +(\d+) \| (.+?) *\| (.+?) *\| (.+?) *\| +([0-9.]+) ms$")


def profile_lines(env: dict) -> list[re.Match]:
    full = {k: v for k, v in os.environ.items() if k != "NNPLUG_ONEDNN_PROFILE"}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD, os.path.dirname(__file__)], env=full,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.startswith("nnplug-onednn: step")]
    matches = [LINE.match(ln) for ln in lines]
    assert all(matches), lines
    return matches


def test_profile_prints_each_step_of_each_run_with_its_node():
    lines = profile_lines({"NNPLUG_ONEDNN_PROFILE": "1", "NNPLUG_CPU_THREADS": "1"})
    steps = [int(m.group(1)) for m in lines]
    per_run = len(steps) // 2
    assert per_run >= 3 and steps[:per_run] == steps[per_run:], steps  # the same steps twice
    nodes = {m.group(2) for m in lines}
    assert {"wconv (Conv)", "gap (GlobalAveragePool)", "fc (Gemm)"} <= nodes, nodes
    kinds = {m.group(3) for m in lines}
    avx2_fma = " avx2" in open("/proc/cpuinfo").read() and " fma" in open("/proc/cpuinfo").read()
    if avx2_fma:  # 64 -> 64 at 12x12 is a Winograd convolution: its transforms are own steps
        assert {"winograd input transform", "winograd output transform", "matmul"} <= kinds, kinds
    assert all(float(m.group(5)) >= 0 for m in lines)


def test_no_profile_lines_without_the_setting():
    assert profile_lines({}) == []
