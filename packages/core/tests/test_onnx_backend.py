"""nnplug.onnx_backend against ONNX's own backend node tests, on the test backend."""

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend, make_runtime

from nnplug import onnx_backend

OPS = {"Relu", "Add", "Mul", "Sigmoid", "Identity"}
CASES = onnx_backend.onnx_node_tests(OPS)


@pytest.fixture(scope="module")
def backend():
    rt = make_runtime(NumpyBackend(ops=OPS))
    onnx_backend.set_runtime(rt)
    yield onnx_backend
    onnx_backend.set_runtime(None)
    rt.close()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node_tests_pass_through_the_backend_interface(backend, case):
    rep = backend.prepare(case.model, "CPU")
    for inputs, expected in case.data_sets:
        for got, want in zip(rep.run(inputs), expected):
            np.testing.assert_allclose(got, want, rtol=case.rtol, atol=case.atol)


def test_node_tests_are_found_and_filtered_by_op():
    assert len(CASES) >= 5
    assert all(c.op_types <= OPS for c in CASES)
    assert "test_relu" in {c.name for c in CASES}


def test_run_node_and_supports_device(backend):
    node = onnx.helper.make_node("Add", ["a", "b"], ["c"])
    a = np.arange(3, dtype=np.float32)
    (c,) = backend.run_node(node, [a, a])
    np.testing.assert_array_equal(c, 2 * a)
    assert backend.supports_device("CPU")
    assert not backend.supports_device("opencl")
