"""A native custom op's shape_infer is checked against the model's declared shapes."""

import pytest
from models import single_op
from numpy_backend import NumpyBackend, make_runtime

from nnplug import CustomOpError


def scale_model(shape):
    return single_op("cstScale", [list(shape)], domain="com.example")


def test_a_native_op_whose_shape_infer_is_wrong_is_refused_at_load(op_libs):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["bad_shape"])
        with pytest.raises(CustomOpError) as info:
            rt.load(scale_model([2, 3]))
    text = str(info.value)
    for needle in ("'cstScale'", "libnnplug_op_bad_shape", "shape_infer()", "[3, 3]", "[2, 3]"):
        assert needle in text, f"{needle!r} not in: {text}"
