"""ONNX's backend node suite on ["opencl", a CPU backend]: every case (``_expanded`` ones
included) with an op among those the model-coverage work put on the device (element-wise
functions, Pow/Max/Min/PRelu, Where, Expand, MatMul, Layer/InstanceNormalization, Resize,
ConvTranspose, the Reduce ops) or one that reads a value on the host (Reshape, Squeeze,
Unsqueeze, ConstantOfShape, Clip).

The OpenCL backend may decline any node (it then runs on the CPU backend), but a node it
claims must build and give ONNX's expected outputs: no case may fail at build or run time or
be wrong. The reference CPU backend (onnx.reference) takes what OpenCL leaves; a case that
backend fails on its own says nothing about OpenCL and is skipped with its error."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ReferenceCPUBackend, new_runtime

from nnplug import onnx_backend
from nnplug_backend_opencl import OpenCLBackend
from nnplug_backend_opencl.ops.common import UNARY_CODES

OP_TYPES = set(UNARY_CODES) | {
    "Pow", "Max", "Min", "PRelu", "Where", "Expand", "MatMul", "LayerNormalization",
    "InstanceNormalization", "Resize", "ConvTranspose", "Reshape", "Squeeze", "Unsqueeze",
    "ConstantOfShape", "Clip", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
    "ReduceSumSquare", "ReduceL1", "ReduceL2",
}
CASES = [c for c in onnx_backend.onnx_node_tests() if c.op_types & OP_TYPES]
ACCUMULATING = {"Conv", "Gemm", "MatMul", "LayerNormalization", "LRN", "AveragePool",
                "GlobalAveragePool", "Softmax", "Gelu", "Resize", "Pow", "Erf"}


@pytest.fixture(scope="module")
def mixed():
    r = new_runtime(OpenCLBackend, ReferenceCPUBackend())
    yield r
    r.close()


@pytest.fixture(scope="module")
def cpu_only():
    r = new_runtime(ReferenceCPUBackend())
    yield r
    r.close()


def tolerance(case):
    rtol, atol = max(case.rtol, 1e-3), max(case.atol, 1e-5)
    if case.op_types & ACCUMULATING:
        atol = max(atol, 1e-4)
    return rtol, atol


def run_case(rt, case, backends):
    net = rt.load(case.model, backends=backends)
    try:
        g = case.model.graph
        inits = {i.name for i in g.initializer}
        in_names = [i.name for i in g.input if i.name not in inits]
        rtol, atol = tolerance(case)
        for inputs, expected in case.data_sets:
            got = net.run(dict(zip(in_names, inputs)))
            for o, w in zip(g.output, expected):
                y = np.asarray(got[o.name])
                assert y.shape == w.shape, (o.name, y.shape, w.shape)
                assert y.dtype == w.dtype, (o.name, y.dtype, w.dtype)
                if w.dtype.kind in "biuU":
                    np.testing.assert_array_equal(y, w)
                else:
                    np.testing.assert_allclose(y, w, rtol=rtol, atol=atol, err_msg=o.name)
    finally:
        net.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case_builds_and_matches_on_opencl_then_cpu(mixed, cpu_only, case):
    try:
        run_case(mixed, case, ["opencl", "refcpu"])
    except Exception as mixed_error:
        try:
            run_case(cpu_only, case, ["refcpu"])
        except Exception as e:
            pytest.skip(f"the CPU backend alone fails too: {type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200] if str(e) else ''}")
        raise mixed_error from None
