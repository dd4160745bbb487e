"""The conformance suite's edge values catch what ONNX's random node tests miss: a backend whose
Relu lets exactly -0.5 through passes every Relu node test, and fails the edge-value check of
Relu, which names the op and the value. The same backend without the planted bug passes."""

import re

import pytest
from nativelib import compile_backend

from nnplug_conformance import run_conformance

pytestmark = pytest.mark.slow


def _planted(tmp_path, name, *flags):
    return compile_backend("testbackend.c", str(tmp_path / f"libnnplug_{name}.so"),
                           ["-DTB_HOST_VISIBLE=1", f'-DTB_ID="{name}"', *flags])


def test_a_relu_letting_minus_half_through_fails_the_edge_values(tmp_path):
    lib = _planted(tmp_path, "planted", "-DTB_RELU_LETS_THROUGH=-0.5f")
    nodes = run_conformance(backend_path=lib, cwd=str(tmp_path), timeout=600,
                            args=["--nnplug-only-ops", "Relu", "-k", "test_node", "-rfp"])
    assert nodes.returncode == 0, nodes.stdout[-4000:]  # random inputs never hold exactly -0.5
    assert re.search(r"test_node\[test_relu\]", nodes.stdout), nodes.stdout[-4000:]

    edge = run_conformance(backend_path=lib, cwd=str(tmp_path), timeout=600,
                           args=["-k", "test_edge_values", "-rf"])
    out = edge.stdout
    assert edge.returncode == 1, out[-4000:]
    failed = re.findall(r"^FAILED \S+\[([^\]]+)\]", out, re.M)
    assert failed == ["Relu"], (failed, out[-4000:])
    assert re.search(r"Relu, edge values: output 'y': 2 of 44 values differ; at \(\d+, \d+\) "
                     r"\(x=np\.float32\(-0\.5\)\): got np\.float32\(-0\.5\), expected np\.float32\(0\.0\)",
                     out), out[-4000:]
    assert re.search(r"^edge values\s+\d+\s+1\s", out, re.M), out[-4000:]


def test_the_same_backend_without_the_bug_passes_the_edge_values(tmp_path):
    lib = _planted(tmp_path, "unplanted")
    result = run_conformance(backend_path=lib, cwd=str(tmp_path), timeout=600,
                             args=["-k", "test_edge_values", "-rfs"])
    assert result.returncode == 0, result.stdout[-4000:]
    assert re.search(r"^edge values\s+[1-9]\d*\s+0\s", result.stdout, re.M), result.stdout[-4000:]
