"""ONNX's own backend node tests, through nnplug.onnx_backend, for every op the backend runs.

A case whose node the backend declines (an element type or attribute it does not handle) is
reported as not claimed; every claimed case must match ONNX's expected outputs. The counts are
printed at the end of the test run."""

from __future__ import annotations

import numpy as np
import pytest

import nnplug
import nnplug_backend_cpu
from nnplug import onnx_backend

CASES = [c for c in onnx_backend.onnx_node_tests(set(nnplug_backend_cpu.OPS))
         if not c.name.endswith("_expanded")]
ACCUMULATING = {"Conv", "Gemm", "MatMul", "ReduceSum", "ReduceMean", "ReduceProd", "ReduceL1",
                "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "LayerNormalization", "LRN",
                "AveragePool", "GlobalAveragePool", "Softmax", "LogSoftmax", "Mean", "Gelu"}
COUNTS = {"passed": 0, "not claimed": 0, "failed": 0}


@pytest.fixture(scope="module")
def backend(rt, monkeypatch_module):
    monkeypatch_module.setenv("NNPLUG_BACKENDS", "cpu")
    onnx_backend.set_runtime(rt)
    yield onnx_backend
    onnx_backend.set_runtime(None)


@pytest.fixture(scope="module")
def monkeypatch_module():
    mp = pytest.MonkeyPatch()
    yield mp
    mp.undo()


def tolerance(case):
    rtol, atol = max(case.rtol, 1e-3), max(case.atol, 1e-5)
    if case.op_types & ACCUMULATING:
        atol = max(atol, 1e-4)
    return rtol, atol


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_test_passes_on_cpu(backend, case):
    try:
        rep = backend.prepare(case.model, "CPU")
    except nnplug.UnsupportedNodeError as e:
        COUNTS["not claimed"] += 1
        pytest.skip(f"not claimed: {str(e).splitlines()[0]}")
    rtol, atol = tolerance(case)
    try:
        assert {a.split()[0] for a in rep.network.assignment.values()} == {"cpu"}
        for inputs, expected in case.data_sets:
            got = rep.run(inputs)
            assert len(got) == len(expected)
            for g, w in zip(got, expected):
                assert g.shape == w.shape, f"shape {g.shape} != {w.shape}"
                assert g.dtype == w.dtype, f"dtype {g.dtype} != {w.dtype}"
                if w.dtype.kind in "biuUO":  # O: strings
                    np.testing.assert_array_equal(g, w)
                else:
                    np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    except BaseException:
        COUNTS["failed"] += 1
        raise
    finally:
        rep.network.close()
    COUNTS["passed"] += 1


def test_node_tests_cover_every_op_the_backend_runs():
    covered = set().union(*(c.op_types for c in CASES))
    # every listed op has ONNX node tests of its own, except ops ONNX ships none for (those are
    # checked against onnxruntime in test_more_ops_match_onnxruntime.py)
    no_onnx_node_tests = {"MaxRoiPool"}
    assert set(nnplug_backend_cpu.OPS) - covered == no_onnx_node_tests
