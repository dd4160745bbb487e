"""The host checks the output shapes a native backend reports (``kernel_output_shapes``)
against the model's declared or inferred shapes before it allocates anything, also where the
backend's own ``run_dynamic`` skips that check (the host's allocator checks each output)."""

from __future__ import annotations

import numpy as np
import pytest
from nativelib import bare_runtime
from onnx import TensorProto, helper

import nnplug


def relu_model(in_shape, out_shape):
    node = helper.make_node("Relu", ["x"], ["y"], name="the_relu")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      in_shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("in_shape,out_shape", [(["N", 4], ["N", 4]), (["N", "M"], ["N", "M"])])
def test_a_wrong_kernel_output_shape_is_an_error_naming_backend_node_and_shapes(
        libs, in_shape, out_shape):
    with bare_runtime() as rt:
        rt.register_backend(libs["bad_shapes"])
        with rt.load(relu_model(in_shape, out_shape)) as net:
            with pytest.raises(nnplug.BackendError) as info:
                net.run({"x": np.ones((3, 4), np.float32)})
    text = str(info.value)
    for needle in ("testbadshapes", "kernel_output_shapes", "'the_relu'", "[6, 8]", "'y'"):
        assert needle in text, f"{needle!r} not in: {text}"


@pytest.mark.parametrize("in_shape,out_shape", [(["N", 4], ["N", 4]), (["N", "M"], ["N", "M"])])
def test_an_output_that_run_dynamic_lets_through_unchecked_is_an_error(libs, in_shape, out_shape):
    with bare_runtime() as rt:
        rt.register_backend(libs["unchecked_dynamic"])
        with rt.load(relu_model(in_shape, out_shape)) as net:
            for feeds in ({"x": np.ones((3, 4), np.float32)}, {"x": np.ones((5, 4), np.float32)}):
                with pytest.raises(nnplug.BackendError) as info:
                    net.run(feeds)
                text = str(info.value)
                for needle in ("testunchecked", "run_dynamic", "'y'", "[6, 8]" if feeds[
                        "x"].shape[0] == 3 else "[10, 8]", "where the model has"):
                    assert needle in text, f"{needle!r} not in: {text}"


def test_the_same_model_runs_on_a_backend_whose_shapes_are_right(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(relu_model(["N", "M"], ["N", "M"])) as net:
            x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
            np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))
