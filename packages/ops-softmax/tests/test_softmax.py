"""cstSoftmax: the numpy reference, the native CPU kernel and the OpenCL kernel."""

import logging
import os
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import nnplug
from nnplug_conformance.fixtures import ReferenceBackend
from nnplug_ops_softmax import SoftmaxOp, softmax

RNG = np.random.default_rng(3)
SHAPES = [(7,), (3, 5), (2, 3, 4), (2, 1, 4, 5), (1, 1), (3, 300), (2, 17, 3, 9), (2, 2, 2, 2, 3)]
CASES = [(s, a) for s in SHAPES for a in range(-len(s), len(s))]


def model(shape, axis=None, domain="com.example", then_argmax=False):
    attrs = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("cstSoftmax", ["x"], ["y"], name="softmax", domain=domain, **attrs)]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))]
    if then_argmax:
        nodes.append(helper.make_node("ArgMax", ["y"], ["i"], name="argmax", axis=1, keepdims=0))
        outputs.append(helper.make_tensor_value_info("i", TensorProto.INT64, [shape[0]]))
    g = helper.make_graph(nodes, "softmax", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, list(shape))], outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)])


def onnx_softmax(x, axis):
    """onnx.reference's standard Softmax (opset 13+: along one axis), the independent check."""
    g = helper.make_graph([helper.make_node("Softmax", ["x"], ["y"], axis=axis)], "ref",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(x.shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return ReferenceEvaluator(m).run(None, {"x": x})[0]


def data(shape, scale=3.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape, axis", CASES)
def test_the_numpy_reference_matches_onnx_reference(shape, axis):
    x = data(shape)
    np.testing.assert_allclose(softmax(x, axis), onnx_softmax(x, axis), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("shape, axis", CASES)
def test_the_native_cpu_kernel_matches_onnx_reference(make_runtime, library, shape, axis):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    net = rt.load(model(shape, axis))
    assert net.assignment == {"softmax": "op:cstSoftmax@cpu"}
    x = data(shape)
    np.testing.assert_allclose(net.run({"x": x})["y"], onnx_softmax(x, axis), rtol=1e-5,
                               atol=1e-7)


def test_axis_defaults_to_the_last(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = data((4, 6))
    np.testing.assert_allclose(rt.load(model((4, 6))).run({"x": x})["y"], softmax(x, -1),
                               rtol=1e-5)


def test_the_python_op_runs_the_same_model(make_runtime, library):
    x = data((2, 3, 50))
    rt_py = make_runtime()
    rt_py.register_custom_op(SoftmaxOp())
    rt_c = make_runtime()
    rt_c.register_custom_ops_library(library)
    for axis in (0, 1, -1):
        np.testing.assert_allclose(rt_c.load(model(x.shape, axis)).run({"x": x})["y"],
                                   rt_py.load(model(x.shape, axis)).run({"x": x})["y"],
                                   rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("shape, axis", [((64, 4096), -1), ((64, 4096), 0), ((16, 64, 128), 1)])
def test_large_tensors_split_across_threads_give_the_same_result(make_runtime, library, shape,
                                                                 axis):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = data(shape)
    np.testing.assert_allclose(rt.load(model(shape, axis)).run({"x": x})["y"],
                               softmax(x.astype(np.float64), axis).astype(np.float32),
                               rtol=2e-5, atol=1e-8)


def special_values():
    x = np.array([
        [1e30, -1e30, 0.0, 1.0],                        # extreme but finite: stable
        [-87.0, 0.0, -200.0, -1e-30],                   # underflowing terms
        [88.0, 87.0, 86.0, 85.0],                       # exp would overflow without the max
        [-np.inf, 1.0, 2.0, -np.inf],                   # -inf elements give 0
        [-np.inf, -np.inf, -np.inf, -np.inf],           # only -inf: NaN
        [np.nan, 1.0, 2.0, 3.0],                        # NaN: the slice is NaN
        [1.0, 2.0, np.nan, 3.0],
        [np.inf, 1.0, 2.0, 3.0],                        # +inf: NaN
        [3.4e38, 3.4e38, -3.4e38, 0.0],                 # float32 max
        [5.0, 5.0, 5.0, 5.0],                           # ties: uniform
    ], np.float32)
    return x


def test_extreme_values_nan_and_infinities_follow_the_reference(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = special_values()
    got = rt.load(model(x.shape, 1)).run({"x": x})["y"]
    with np.errstate(invalid="ignore", over="ignore"):
        want = onnx_softmax(x, 1)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-30, equal_nan=True)
    assert np.isnan(got[4:8]).all() and not np.isnan(got[[0, 1, 2, 3, 8, 9]]).any()
    assert got[3, 0] == 0 and got[3, 3] == 0
    np.testing.assert_allclose(softmax(x, 1), want, rtol=1e-6, equal_nan=True)
    # the same along a non-contiguous axis (the strided kernel)
    got0 = rt.load(model(x.T.shape, 0)).run({"x": np.ascontiguousarray(x.T)})["y"]
    np.testing.assert_allclose(got0, want.T, rtol=1e-5, atol=1e-30, equal_nan=True)


def test_an_axis_out_of_range_fails_the_load_naming_the_node(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    with pytest.raises(nnplug.CustomOpError) as e:
        rt.load(model((2, 3), axis=2))
    assert "'softmax'" in str(e.value) and "axis" in str(e.value)
    rt_py = make_runtime()
    rt_py.register_custom_op(SoftmaxOp())
    with pytest.raises(nnplug.CustomOpError, match="axis"):
        rt_py.load(model((2, 3), axis=-3))


def test_symbolic_dimensions_are_resolved_per_run(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    net = rt.load(model(("N", 5), 0))
    for n in (1, 4, 33):
        x = data((n, 5))
        np.testing.assert_allclose(net.run({"x": x})["y"], softmax(x, 0), rtol=1e-5, atol=1e-7)


def test_a_model_with_cstsoftmax_and_argmax_runs_on_cpu(make_runtime, library):
    rt = make_runtime(ReferenceBackend())
    rt.register_custom_ops_library(library)
    net = rt.load(model((8, 10), 1, domain="my.ops", then_argmax=True))
    assert net.assignment == {"softmax": "op:cstSoftmax@cpu", "argmax": "reference"}
    x = data((8, 10))
    out = net.run({"x": x})
    np.testing.assert_allclose(out["y"], softmax(x, 1), rtol=1e-5)
    np.testing.assert_array_equal(out["i"], np.argmax(x, axis=1))


@pytest.mark.opencl
def test_the_opencl_kernel_matches_the_reference(make_runtime, library, opencl_backend):
    rt = make_runtime(opencl_backend, ReferenceBackend())
    rt.register_custom_ops_library(library)
    for shape, axis in [((3, 5), -1), ((2, 3, 4), 1), ((2, 3, 4), 0), ((4, 1000), 1), ((7,), 0)]:
        net = rt.load(model(shape, axis), backends=["opencl", "reference"])
        assert net.assignment == {"softmax": "op:cstSoftmax@gpu"}
        x = data(shape)
        np.testing.assert_allclose(net.run({"x": x})["y"], onnx_softmax(x, axis), rtol=1e-5,
                                   atol=1e-7)
    x = special_values()
    net = rt.load(model(x.shape, 1), backends=["opencl", "reference"])
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_allclose(net.run({"x": x})["y"], onnx_softmax(x, 1), rtol=1e-5,
                                   atol=1e-30, equal_nan=True)


@pytest.mark.opencl
def test_a_model_with_cstsoftmax_and_argmax_runs_on_opencl(make_runtime, library,
                                                           opencl_backend):
    rt = make_runtime(opencl_backend, ReferenceBackend())
    rt.register_custom_ops_library(library)
    net = rt.load(model((8, 10), 1, then_argmax=True), backends=["opencl", "reference"])
    assert net.assignment["softmax"] == "op:cstSoftmax@gpu"
    x = data((8, 10))
    out = net.run({"x": x})
    np.testing.assert_allclose(out["y"], softmax(x, 1), rtol=1e-5)
    np.testing.assert_array_equal(out["i"], np.argmax(x, axis=1))


def test_the_library_in_a_folder_and_the_entry_point_give_identical_results(tmp_path, library):
    folder = tmp_path / "ops"
    folder.mkdir()
    shutil.copy(library, folder / os.path.basename(library))
    x = data((5, 40))
    m = model(x.shape, 0)
    with nnplug.Runtime(nnplug.CreationOptions.isolated(custom_op_paths=str(folder))) as rt:
        assert rt.load_errors == [] and str(folder) in rt.ops["cstSoftmax"].source
        from_folder = rt.load(m, backends=[]).run({"x": x})["y"]  # the CPU kernel
    with nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path="",
                                               custom_op_paths="")) as rt:
        op = rt.ops["cstSoftmax"]
        assert op.source.startswith(library)
        from_entry_point = rt.load(m, backends=[]).run({"x": x})["y"]
    np.testing.assert_array_equal(from_folder, from_entry_point)


def test_debug_logging_shows_the_callbacks(make_runtime, library, caplog):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    with caplog.at_level(logging.DEBUG, logger="nnplug.ops"):
        rt.load(model((2, 3), 1)).run({"x": data((2, 3))})
    text = caplog.text
    assert "cstSoftmax[softmax] init(" in text and "cstSoftmax[softmax] compute(" in text
    assert "x: float32[2,3] n_elems=6 size=24" in text


def test_model_is_valid_onnx():
    onnx.checker.check_model(model((2, 3), 1, then_argmax=True))
