"""The core validates every node before any backend sees it (``nnplug.stages.validate``): invalid
models get a ValidationError naming node, op and attribute/input on every installed backend,
and valid models (ONNX's node suite, models with unknown shapes, custom-domain ops) still load.
"""

from __future__ import annotations

import importlib.metadata
import os

import numpy as np
import onnx
import pytest
from numpy_backend import NumpyBackend
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug import Backend, HostDeviceAPI, ValidationError

F = TensorProto.FLOAT
X4 = ("x", [1, 4, 5, 5])


def one_node(op, inputs, attrs=None, *, outputs=("y",), opset=17, name="bad_node"):
    """A one-node model. ``inputs``: list of (name, shape[, elem type]) graph inputs or
    (name, ndarray) initializers; outputs get the shape ONNX's lenient inference gives, or
    an unknown one."""
    graph_inputs, inits, names = [], [], []
    for item in inputs:
        nm, spec = item[0], item[1]
        names.append(nm)
        if nm in names[:-1] or not nm:
            continue
        if isinstance(spec, np.ndarray):
            inits.append(numpy_helper.from_array(spec, nm))
        else:
            graph_inputs.append(helper.make_tensor_value_info(nm, item[2] if len(item) > 2 else F,
                                                              spec))
    node = helper.make_node(op, names, list(outputs), name=name, **(attrs or {}))
    opsets = [helper.make_opsetid("", opset)]
    probe = helper.make_model(helper.make_graph([node], "g", graph_inputs, [], inits),
                              opset_imports=opsets)
    huge = any(isinstance(v, int) and abs(v) > 2**16 for v in (attrs or {}).values())
    try:  # (ONNX's inference itself crashes on some huge axes: not asked then)
        inferred = {} if huge else {
            v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    except Exception:
        inferred = {}
    outs = [inferred[o] if o in inferred and inferred[o].type.tensor_type.HasField("shape")
            else helper.make_tensor_value_info(o, F, [None]) for o in outputs]
    model = helper.make_model(helper.make_graph([node], "g", graph_inputs, outs, inits),
                              opset_imports=opsets)
    model.ir_version = 8
    return model


def w(*shape):
    return np.ones(shape, np.float32)


def i64(*values):
    return np.array(values, np.int64)


# name -> (model, words the error must contain besides the node name and op type)
INVALID = {
    "batchnorm_scale_shorter_than_channels": (
        one_node("BatchNormalization", [X4, ("s", w(2)), ("b", w(2)), ("m", w(2)), ("v", w(2))]),
        ["4", "2"]),
    "concat_mismatched_shapes": (
        one_node("Concat", [("a", [2, 3]), ("b", [2, 4])], {"axis": 0}), ["merge"]),
    "conv_kernel_shape_not_the_weight": (
        one_node("Conv", [X4, ("w", w(2, 4, 3, 3))], {"kernel_shape": [2, 2]}), ["kernel_shape"]),
    "conv_dilations_zero": (
        one_node("Conv", [X4, ("w", w(2, 4, 3, 3))], {"dilations": [0, 0]}), ["dilations"]),
    "conv_group_not_dividing_channels": (
        one_node("Conv", [X4, ("w", w(2, 4, 3, 3))], {"group": 3}), ["group"]),
    "conv_weight_channels_wrong": (
        one_node("Conv", [X4, ("w", w(2, 3, 3, 3))]), ["group", "channels"]),
    "conv_bias_wrong_length": (
        one_node("Conv", [X4, ("w", w(2, 4, 3, 3)), ("b", w(3))]), ["bias", "[2]"]),
    "convtranspose_kernel_shape_not_the_weight": (
        one_node("ConvTranspose", [X4, ("w", w(4, 2, 3, 3))], {"kernel_shape": [2, 2]}),
        ["kernel_shape"]),
    "maxpool_kernel_zero": (
        one_node("MaxPool", [X4], {"kernel_shape": [0, 0]}), ["kernel_shape"]),
    "maxpool_pads_not_smaller_than_kernel": (
        one_node("MaxPool", [X4], {"kernel_shape": [2, 2], "pads": [2, 2, 2, 2]}), ["pads"]),
    "averagepool_pads_not_smaller_than_kernel": (
        one_node("AveragePool", [X4], {"kernel_shape": [2, 2], "pads": [0, 2, 0, 0]}), ["pads"]),
    "transpose_perm_repeated": (
        one_node("Transpose", [("a", [2, 3])], {"perm": [0, 0]}), ["perm"]),
    "transpose_perm_negative": (
        one_node("Transpose", [("a", [2, 3])], {"perm": [-1, 0]}), ["perm"]),
    "transpose_perm_too_short": (
        one_node("Transpose", [("a", [2, 3])], {"perm": [0]}), ["perm"]),
    "flatten_axis_9": (one_node("Flatten", [("a", [2, 3])], {"axis": 9}), ["axis"]),
    "unsqueeze_axis_99": (
        one_node("Unsqueeze", [("a", [2, 3]), ("axes", i64(99))]), ["axis"]),
    "unsqueeze_axis_repeated": (
        one_node("Unsqueeze", [("a", [2, 3]), ("axes", i64(1, 1))]), ["Axis 1"]),
    "lrn_size_zero": (one_node("LRN", [X4], {"size": 0}), ["size"]),
    "lrn_size_huge": (one_node("LRN", [X4], {"size": 10**9 + 1}), ["size"]),
    "reducesum_keepdims_2": (one_node("ReduceSum", [X4], {"keepdims": 2}), ["keepdims"]),
    "argmax_keepdims_5": (
        one_node("ArgMax", [X4], {"keepdims": 5}), ["keepdims"]),
    "pad_reflect_wider_than_input": (
        one_node("Pad", [X4, ("p", i64(0, 0, 5, 5, 0, 0, 5, 5))], {"mode": "reflect"}),
        ["reflect", "pads"]),
    "global_average_pool_over_0x0": (
        one_node("GlobalAveragePool", [("x", [1, 4, 0, 0])]), ["empty"]),
    "maxpool_over_0x0": (
        one_node("MaxPool", [("x", [1, 4, 0, 0])], {"kernel_shape": [1, 1]}), ["empty"]),
    "maxpool_window_larger_than_padded_input": (
        one_node("MaxPool", [("x", [1, 4, 3, 3])], {"kernel_shape": [5, 5]}),
        ["kernel_shape", "spans 5", "3"]),
    "maxpool_dilated_window_larger_than_padded_input": (
        one_node("MaxPool", [("x", [1, 4, 5, 5])],
                 {"kernel_shape": [3, 3], "dilations": [4, 4], "pads": [1, 1, 1, 1]}),
        ["kernel_shape", "spans 9", "7 with its pads"]),
    "conv_weight_larger_than_padded_input": (
        one_node("Conv", [("x", [1, 4, 3, 3]), ("w", w(2, 4, 6, 6))], {"pads": [1, 1, 1, 1]}),
        ["kernel_shape", "spans 6", "5 with its pads"]),
    "constant_of_shape_past_int64_bytes": (
        one_node("ConstantOfShape", [("s", i64(2**62, 4))]), ["bytes", "memory"]),
    "constant_of_shape_2e32_squared": (
        one_node("ConstantOfShape", [("s", i64(2**32, 2**32))]), ["bytes", "memory"]),
    "gemm_inner_dims_differ": (
        one_node("Gemm", [("a", [2, 3]), ("b", [4, 5])]), ["4", "3"]),
    "gemm_bias_not_broadcasting": (
        one_node("Gemm", [("a", [2, 3]), ("b", [3, 5]), ("c", w(4))]), ["broadcast"]),
    "add_shapes_not_broadcasting": (
        one_node("Add", [("a", [2, 3]), ("b", [4, 5])]), ["Incompatible"]),
    "reshape_to_another_element_count": (
        one_node("Reshape", [("a", [2, 3]), ("s", i64(4, 2))]), ["reshape", "6"]),
    "gather_constant_index_out_of_range": (
        one_node("Gather", [("a", [2, 3]), ("i", i64(5))]), ["index 5"]),
    "instance_norm_scale_shorter_than_channels": (
        one_node("InstanceNormalization", [X4, ("s", w(2)), ("b", w(2))]), ["scale"]),
    "depth_to_space_channels_not_divisible": (
        one_node("DepthToSpace", [X4], {"blocksize": 3}), ["blocksize"]),
    "conv_auto_pad_unknown": (
        one_node("Conv", [X4, ("w", w(2, 4, 3, 3))], {"auto_pad": "FOO"}), ["auto_pad"]),
    "pad_mode_unknown": (
        one_node("Pad", [X4, ("p", i64(0, 0, 1, 1, 0, 0, 1, 1))], {"mode": "mirror"}),
        ["mode"]),
    "resize_negative_scale": (
        one_node("Resize", [X4, ("", None), ("sc", np.array([1, 1, -2, 2], np.float32))]),
        ["scales"]),
    "range_zero_delta": (
        one_node("Range", [("s", np.array(0, np.float32)), ("l", np.array(3, np.float32)),
                           ("d", np.array(0, np.float32))]), ["delta", "non-zero"]),
    "softmax_axis_float": (one_node("Softmax", [("a", [2, 3])], {"axis": 1.5}), ["axis"]),
    "relu_unknown_attribute": (one_node("Relu", [("a", [2, 3])], {"alpha": 1}), ["alpha"]),
    "relu_two_inputs": (one_node("Relu", [("a", [2, 3]), ("a", [2, 3])]), ["input"]),
    "relu_on_strings": (
        one_node("Relu", [("a", [2, 3], TensorProto.STRING)]), ["string"]),
    "opset_10000": (one_node("Relu", [("a", [2, 3])], opset=10000), ["10000", "opset"]),
    # found by tools/fuzz.py: onnx's own shape inference segfaults on this axis
    "layernorm_axis_beyond_int32": (
        one_node("LayerNormalization", [X4, ("s", w(5)), ("b", w(5))], {"axis": 2**31}),
        ["axis", str(2**31)]),
    "softmax_axis_int64_min": (
        one_node("Softmax", [("a", [2, 3])], {"axis": -(2**63)}), ["axis"]),
}

# Cases the error cannot name a node for (the model as a whole is at fault).
MODEL_LEVEL = {"opset_10000"}


class Permissive(Backend):
    """Claims every standard node and fails the test if asked to build one: an invalid node
    must be stopped before any backend sees it."""

    id = "permissive"
    device_type = "cpu"

    def device_api(self):
        return HostDeviceAPI()

    def supports(self, node, graph):
        return True

    def build(self, subgraph, target):
        raise AssertionError(f"backend asked to build invalid node(s) "
                             f"{[n.name for n in subgraph.nodes]}")


def _backend_entry_points() -> dict:
    """This repository's installed backends (``nnplug.backends`` entry points) by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group="nnplug.backends")
            if ep.module.startswith("nnplug_backend_")}


REQUIRE_OPENCL = os.environ.get("NNPLUG_REQUIRE_OPENCL", "") not in ("", "0")


@pytest.fixture(scope="module", params=["permissive", *sorted(_backend_entry_points())])
def backend_runtime(request):
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    if request.param == "permissive":
        rt.register_backend(Permissive())
        yield rt, "permissive"
        rt.close()
        return
    ep = _backend_entry_points()[request.param]
    obj = ep.load()
    if callable(obj) and not isinstance(obj, type):
        obj = obj()
    if ep.name == "opencl":
        try:
            from nnplug_backend_opencl import devices

            ok = bool(devices.visible_devices())
        except Exception:  # noqa: BLE001 - pyopencl without a platform
            ok = False
        if not ok:
            if REQUIRE_OPENCL:
                pytest.fail("NNPLUG_REQUIRE_OPENCL=1 but no OpenCL device is visible")
            pytest.skip("no OpenCL platform/device found (install pocl-opencl-icd)")
    rt.register_backend(obj)
    yield rt, ep.name
    rt.close()


def assert_clear(err: Exception, model: onnx.ModelProto, case: str) -> None:
    text = str(err)
    assert isinstance(err, ValidationError) and isinstance(err, nnplug.NnplugError), text
    if case not in MODEL_LEVEL:
        op = model.graph.node[0].op_type
        assert "'bad_node'" in text and f"op {op}" in text, text
        assert err.node == "bad_node" and err.op_type == op
    assert "Fix:" in text, text
    for needle in INVALID[case][1]:
        assert needle in text, f"{needle!r} not in: {text}"


@pytest.mark.parametrize("case", sorted(INVALID))
def test_invalid_model_is_rejected_before_any_backend_with_a_clear_error(backend_runtime, case):
    rt, backend = backend_runtime
    model = INVALID[case][0]
    with pytest.raises(nnplug.ModelError) as info:
        rt.load(model, backends=[backend])
    if not isinstance(info.value, ValidationError):
        # the loader's whole-model ONNX checker stopped it first; the test below shows the
        # validation catches it too
        assert "ONNX checker" in str(info.value)
        return
    assert_clear(info.value, model, case)


@pytest.mark.parametrize("case", sorted(INVALID))
def test_validation_catches_each_case_on_its_own(case, monkeypatch):
    """Without the loader's whole-model checker (which a model may fail only for reasons
    that do not matter to running it), the validation alone rejects every case."""
    monkeypatch.setattr(onnx.checker, "check_model", lambda *a, **k: None)
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    rt.register_backend(Permissive())
    model = INVALID[case][0]
    with pytest.raises(ValidationError) as info:
        rt.load(model)
    assert_clear(info.value, model, case)


def test_validation_error_names_the_attribute_in_its_fields():
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    rt.register_backend(Permissive())
    model, _ = INVALID["conv_kernel_shape_not_the_weight"]
    with pytest.raises(ValidationError) as info:
        rt.load(model)
    assert info.value.field == "kernel_shape"
    assert "onnx.ai/onnx/operators/onnx__Conv.html" in str(info.value)


# -- what must still load -------------------------------------------------------------------
def numpy_runtime():
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    rt.register_backend(NumpyBackend())
    return rt


def test_unknown_shapes_and_symbolic_dims_are_tolerated():
    x = helper.make_tensor_value_info("x", F, ["N", None])
    y = helper.make_tensor_value_info("y", F, [None, None])
    shape = helper.make_tensor_value_info("s", TensorProto.INT64, [2])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "s"], ["y"], name="reshape")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x, shape], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with numpy_runtime() as rt, rt.load(model) as net:
        out = net.run({"x": -np.ones((2, 3), np.float32), "s": i64(3, 2)})
    assert out["y"].shape == (3, 2) and not out["y"].any()


def test_custom_domain_op_without_schema_reaches_its_plugin():
    class Twice:
        op_type = "Twice"

        def shape_infer(self, node, in_shapes, in_dtypes):
            return [in_shapes[0]], [in_dtypes[0]]

        def compute(self, node, inputs):
            return [inputs[0] * 2]

    node = helper.make_node("Twice", ["x"], ["y"], domain="com.example", name="twice",
                            strange_attribute=7)
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, [2])],
                          [helper.make_tensor_value_info("y", F, [2])]),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    with numpy_runtime() as rt:
        rt.register_custom_op(Twice())
        with rt.load(model) as net:
            np.testing.assert_array_equal(net.run({"x": np.ones(2, np.float32)})["y"], [2, 2])


def test_onnx_node_suite_models_pass_validation():
    """Every model of ONNX's node suite is valid: none may be rejected by the validation."""
    from nnplug.stages.loader import load
    from nnplug.stages.validate import validate
    from nnplug_conformance import node_tests

    rejected = []
    for case in node_tests.collect():
        try:
            model = load(case.load_model())
        except nnplug.ModelError:
            continue  # the loader's own limits, not the validation's
        try:
            validate(model)
        except ValidationError as e:
            rejected.append(f"{case.name}: {e}")
    assert not rejected, f"{len(rejected)} valid node models rejected:\n" + "\n".join(rejected)
