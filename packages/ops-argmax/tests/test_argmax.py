"""The ArgMax override: numpy reference, native CPU kernel, OpenCL kernel, precedence."""

import os
import shutil

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import nnplug
from nnplug_conformance.fixtures import ReferenceBackend
from nnplug_ops_argmax import ArgMaxOp, argmax

RNG = np.random.default_rng(11)
SHAPES = [(7,), (3, 5), (2, 3, 4), (2, 1, 4, 5), (1, 1), (3, 300), (2, 17, 3, 9)]
CASES = [(s, a, k, last) for s in SHAPES for a in range(-len(s), len(s))
         for k in (0, 1) for last in (0, 1)]


def out_shape(shape, axis, keepdims):
    axis %= len(shape)
    return [1 if d == axis else s for d, s in enumerate(shape) if keepdims or d != axis]


def model(shape, axis=0, keepdims=1, last=0, softmax_first=False):
    nodes = [helper.make_node("ArgMax", ["s" if softmax_first else "x"], ["i"], name="argmax",
                              axis=axis, keepdims=keepdims, select_last_index=last)]
    if softmax_first:
        nodes.insert(0, helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=axis))
    g = helper.make_graph(nodes, "argmax",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("i", TensorProto.INT64,
                                                         out_shape(shape, axis, keepdims))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def onnx_argmax(x, axis, keepdims, last):
    return ReferenceEvaluator(model(x.shape, axis, keepdims, last)).run(None, {"x": x})[0]


def data(shape):
    return RNG.integers(-4, 5, shape).astype(np.float32)  # small integers: many ties


@pytest.mark.parametrize("shape, axis, keepdims, last", CASES)
def test_the_numpy_reference_matches_onnx_reference(shape, axis, keepdims, last):
    x = data(shape)
    np.testing.assert_array_equal(argmax(x, axis, keepdims, last),
                                  onnx_argmax(x, axis, keepdims, last))


@pytest.mark.parametrize("shape, axis, keepdims, last", CASES)
def test_the_native_cpu_kernel_matches_onnx_reference(make_runtime, library, shape, axis,
                                                      keepdims, last):
    rt = make_runtime(ReferenceBackend())
    rt.register_custom_ops_library(library)
    net = rt.load(model(shape, axis, keepdims, last))
    assert net.assignment == {"argmax": "op:ArgMax@cpu"}
    x = data(shape)
    got = net.run({"x": x})["i"]
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, onnx_argmax(x, axis, keepdims, last))


def test_ties_give_the_first_or_the_last_index(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = np.array([[1, 3, 3, 0], [-np.inf, -np.inf, -np.inf, -np.inf], [2, 2, 2, 2],
                  [0, 5, 1, 5]], np.float32)
    first = rt.load(model(x.shape, 1, 0, 0)).run({"x": x})["i"]
    last = rt.load(model(x.shape, 1, 0, 1)).run({"x": x})["i"]
    np.testing.assert_array_equal(first, [1, 0, 0, 1])
    np.testing.assert_array_equal(last, [2, 3, 3, 3])
    # along the strided (non-last) axis too
    first0 = rt.load(model(x.T.shape, 0, 0, 0)).run({"x": np.ascontiguousarray(x.T)})["i"]
    last0 = rt.load(model(x.T.shape, 0, 0, 1)).run({"x": np.ascontiguousarray(x.T)})["i"]
    np.testing.assert_array_equal(first0, [1, 0, 0, 1])
    np.testing.assert_array_equal(last0, [2, 3, 3, 3])


def special_values():
    return np.array([
        [np.nan, 1, np.nan, 2],
        [1, np.inf, 3, np.inf],
        [-np.inf, -1e38, -np.inf, -3.4e38],
        [3.4e38, 1e30, 3.4e38, -np.inf],
        [0.0, -0.0, 0.0, -0.0],
        [1, 2, 3, np.nan],
    ], np.float32)


def onnxruntime_argmax(x, axis, keepdims, last):
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model(x.shape, axis, keepdims, last).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("last", [0, 1])
def test_nan_and_infinities_give_onnxruntimes_answer(make_runtime, library, last):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = special_values()
    for axis in (0, 1):
        want = onnxruntime_argmax(x, axis, 1, last)
        np.testing.assert_array_equal(rt.load(model(x.shape, axis, 1, last)).run({"x": x})["i"],
                                      want)
        np.testing.assert_array_equal(argmax(x, axis, 1, last), want)
    # a NaN is picked only where it comes first (row 0), never later (row 5)
    expected_rows = [0, 1, 1, 0, 0, 2] if not last else [0, 3, 1, 2, 3, 2]
    np.testing.assert_array_equal(rt.load(model(x.shape, 1, 0, last)).run({"x": x})["i"],
                                  expected_rows)


def test_large_tensors_split_across_threads_give_the_same_result(make_runtime, library):
    rt = make_runtime()
    rt.register_custom_ops_library(library)
    x = RNG.standard_normal((64, 4096)).astype(np.float32)
    for axis, last in ((1, 0), (0, 1)):
        np.testing.assert_array_equal(rt.load(model(x.shape, axis, 0, last)).run({"x": x})["i"],
                                      argmax(x, axis, 0, last))


def test_the_override_wins_over_the_backend_kernel_and_can_be_switched_off(make_runtime,
                                                                           library):
    rt = make_runtime(ReferenceBackend())
    rt.register_custom_ops_library(library)
    assert rt.ops["ArgMax"].override
    assert rt.load(model((3, 4))).assignment == {"argmax": "op:ArgMax@cpu"}
    off = make_runtime(ReferenceBackend(), disable_op_overrides=True)
    off.register_custom_ops_library(library)
    net = off.load(model((3, 4)))
    assert net.assignment == {"argmax": "reference"}
    x = data((3, 4))
    np.testing.assert_array_equal(net.run({"x": x})["i"], argmax(x, 0))


def test_other_input_types_are_declined_to_the_backend_kernel(make_runtime, library):
    rt = make_runtime(ReferenceBackend())
    rt.register_custom_ops_library(library)
    g = helper.make_graph([helper.make_node("ArgMax", ["x"], ["i"], name="argmax", axis=1)], "g",
                          [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
                          [helper.make_tensor_value_info("i", TensorProto.INT64, [2, 1])])
    net = rt.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]))
    assert net.assignment == {"argmax": "reference"}
    x = RNG.standard_normal((2, 3))
    np.testing.assert_array_equal(net.run({"x": x})["i"], argmax(x, 1))


def test_the_python_op_gives_the_same_answers(make_runtime, library):
    py = make_runtime()
    py.register_custom_op(ArgMaxOp(), override=True)
    c = make_runtime()
    c.register_custom_ops_library(library)
    x = special_values()
    for axis, k, last in ((0, 1, 0), (1, 0, 1), (-1, 1, 1)):
        np.testing.assert_array_equal(py.load(model(x.shape, axis, k, last)).run({"x": x})["i"],
                                      c.load(model(x.shape, axis, k, last)).run({"x": x})["i"])


def test_a_model_with_softmax_then_argmax_runs_on_cpu(make_runtime, library):
    rt = make_runtime(ReferenceBackend())
    rt.register_custom_ops_library(library)
    net = rt.load(model((8, 10), 1, 0, softmax_first=True))
    assert net.assignment == {"softmax": "reference", "argmax": "op:ArgMax@cpu"}
    x = RNG.standard_normal((8, 10)).astype(np.float32)
    np.testing.assert_array_equal(net.run({"x": x})["i"], np.argmax(x, axis=1))


@pytest.mark.opencl
def test_the_opencl_kernel_matches_the_reference(make_runtime, library, opencl_backend):
    rt = make_runtime(opencl_backend, ReferenceBackend())
    rt.register_custom_ops_library(library)
    for shape, axis, k, last in [((3, 5), -1, 1, 0), ((2, 3, 4), 1, 0, 1), ((2, 3, 4), 0, 1, 1),
                                 ((4, 1000), 1, 0, 0), ((7,), 0, 0, 1)]:
        net = rt.load(model(shape, axis, k, last), backends=["opencl", "reference"])
        assert net.assignment == {"argmax": "op:ArgMax@gpu"}
        x = data(shape)
        np.testing.assert_array_equal(net.run({"x": x})["i"], onnx_argmax(x, axis, k, last))
    x = special_values()
    for last in (0, 1):
        net = rt.load(model(x.shape, 1, 0, last), backends=["opencl", "reference"])
        np.testing.assert_array_equal(net.run({"x": x})["i"], onnxruntime_argmax(x, 1, 0, last))


@pytest.mark.opencl
def test_a_model_with_softmax_then_argmax_runs_on_opencl(make_runtime, library, opencl_backend):
    rt = make_runtime(opencl_backend, ReferenceBackend())
    rt.register_custom_ops_library(library)
    net = rt.load(model((8, 10), 1, 0, softmax_first=True), backends=["opencl", "reference"])
    assert net.assignment["argmax"] == "op:ArgMax@gpu"
    x = RNG.standard_normal((8, 10)).astype(np.float32)
    np.testing.assert_array_equal(net.run({"x": x})["i"], np.argmax(x, axis=1))


def test_the_library_in_a_folder_and_the_entry_point_give_identical_results(tmp_path, library):
    folder = tmp_path / "ops"
    folder.mkdir()
    shutil.copy(library, folder / os.path.basename(library))
    x = data((5, 40))
    m = model(x.shape, 1, 0, 1)
    with nnplug.Runtime(nnplug.CreationOptions.isolated(custom_op_paths=str(folder))) as rt:
        assert rt.load_errors == [] and str(folder) in rt.ops["ArgMax"].source
        from_folder = rt.load(m, backends=[]).run({"x": x})["i"]  # the CPU kernel
    with nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path="",
                                               custom_op_paths="")) as rt:
        assert rt.ops["ArgMax"].source.startswith(library)
        from_entry_point = rt.load(m, backends=[]).run({"x": x})["i"]
    np.testing.assert_array_equal(from_folder, from_entry_point)
    np.testing.assert_array_equal(from_folder, argmax(x, 1, 0, 1))
