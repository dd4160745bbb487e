"""Concurrent runs, thread counts, and clear errors for malformed nodes and inputs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import one_node_model, reference, run_cpu, zoo_input, zoo_model
from onnx import helper, numpy_helper

import nnplug
from nnplug_conformance.fixtures import run_from_threads


def test_many_threads_run_one_network_with_identical_results(rt):
    model = zoo_model("shufflenet")
    inp, _ = zoo_input(model)
    rng = np.random.default_rng(0)
    xs = [rng.random((1, 3, 224, 224), dtype=np.float32) for _ in range(4)]
    with rt.load(model, backends=["cpu"]) as net:
        want = [net.run({inp: x}) for x in xs]
        results = run_from_threads(lambda x: net.run({inp: x}), xs, threads=8, rounds=3)
    assert len(results) == 24
    for k, out in results:
        for name in out:
            np.testing.assert_array_equal(out[name], want[k][name])


def test_thread_count_does_not_change_results(rt):
    # Random weights (the constant-weight case is test_matrix_products_are_deterministic's)
    from nnplug_conformance.zoo import randomize_weights

    model = randomize_weights(zoo_model("squeezenet"), seed=11)
    inp, x = zoo_input(model, seed=2)
    lib = rt.backends["cpu"].backend
    with rt.load(model, backends=["cpu"]) as net:
        base = net.run({inp: x})
        try:
            for n in (1, 3):
                lib.set_num_threads(n)
                other = net.run({inp: x})
                for k in base:  # bit-identical: every product is summed in one order (gemm.c)
                    np.testing.assert_array_equal(other[k], base[k], err_msg=f"{n} thread(s)")
        finally:
            lib.set_num_threads(0)


def expect_error(rt, model, feeds, *needles):
    with pytest.raises(nnplug.NnplugError) as info:
        run_cpu(rt, model, feeds)
    text = str(info.value)
    for n in needles:
        assert n in text, f"{n!r} not in: {text}"


def test_conv_group_not_dividing_channels_names_node_and_attribute(rt):
    x = np.zeros((1, 6, 5, 5), np.float32)
    w = np.zeros((4, 2, 3, 3), np.float32)
    model, feeds = one_node_model("Conv", [x, w], dict(group=3), const_inputs=(1,))
    model.graph.output[0].type.tensor_type.shape.Clear()
    expect_error(rt, model, feeds, "conv_node", "Conv", "group")


def test_conv_with_wrong_pads_length_names_attribute(rt):
    x = np.zeros((1, 2, 5, 5), np.float32)
    w = np.zeros((4, 2, 3, 3), np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="bad_conv", pads=[1, 1, 1])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x.shape)],
                          [helper.make_tensor_value_info("y", 1, [1, 4, 3, 3])],
                          [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(nnplug.NnplugError) as info:
        rt.load(model, backends=["cpu"])
    assert "bad_conv" in str(info.value) and "pads" in str(info.value)


def test_gather_index_out_of_range_is_an_error_not_a_crash(rt):
    data = np.arange(5, dtype=np.float32)
    model, feeds = one_node_model("Gather", [data, np.array([1, 7], np.int64)], {})
    expect_error(rt, model, feeds, "gather_node", "index 7 is out of range")


def test_reshape_to_wrong_size_at_run_time_names_the_node(rt):
    x = np.zeros((2, 3), np.float32)
    model, feeds = one_node_model("Reshape", [x, np.array([4, 2], np.int64)], {})
    expect_error(rt, model, feeds, "reshape_node", "cannot reshape")


def test_transpose_with_bad_perm_names_attribute(rt):
    node = helper.make_node("Transpose", ["x"], ["y"], name="tr", perm=[0, 0])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                          [helper.make_tensor_value_info("y", 1, [3, 2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(nnplug.NnplugError) as info:
        rt.load(model, backends=["cpu"]).run({"x": np.zeros((2, 3), np.float32)})
    assert "tr" in str(info.value) and "perm" in str(info.value)


def test_unsupported_node_is_declined_not_crashed(rt):
    x = np.zeros((1, 2, 3, 4, 5), np.float32)
    w = np.zeros((2, 2, 1, 1, 1), np.float32)
    model, feeds = one_node_model("Conv", [x, w], {}, const_inputs=(1,))
    with pytest.raises(nnplug.UnsupportedNodeError):
        rt.load(model, backends=["cpu"])


def test_wrong_input_shape_is_an_input_error(rt):
    model = zoo_model("squeezenet")
    inp, _ = zoo_input(model)
    with rt.load(model, backends=["cpu"]) as net:
        with pytest.raises(nnplug.InputError):
            net.run({inp: np.zeros((1, 3, 200, 200), np.float32)})


def _chain_model(nodes, inputs, outputs, inits, opset=15):
    g = helper.make_graph(nodes, "chain", inputs, outputs, inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_fused_conv_bn_mul_add_relu_residual_chain_matches_reference(rt):
    """The planner's folds (BN, per-channel Mul/Add into Conv), residual Add and Relu fusion."""
    r = np.random.default_rng(3)
    C = 8
    t = lambda *s: r.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w1", t(C, C, 3, 3)), ("b1", t(C)), ("s", t(C)), ("bb", t(C)), ("m", t(C)),
        ("v", r.uniform(0.5, 2, C).astype(np.float32)), ("mul", t(C, 1, 1)), ("add", t(1, C, 1, 1)),
        ("w2", t(C, C, 1, 1)), ("s2", t(C)), ("bb2", t(C)), ("m2", t(C)),
        ("v2", r.uniform(0.5, 2, C).astype(np.float32)), ("clip_lo", np.array(0, np.float32)),
        ("clip_hi", np.array(0.8, np.float32))]]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"]),
        helper.make_node("Mul", ["n1", "mul"], ["m1"]),
        helper.make_node("Add", ["add", "m1"], ["a1"]),
        helper.make_node("Relu", ["a1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"]),
        helper.make_node("BatchNormalization", ["c2", "s2", "bb2", "m2", "v2"], ["n2"]),
        helper.make_node("Add", ["n2", "x"], ["res"]),
        helper.make_node("Clip", ["res", "clip_lo", "clip_hi"], ["y"]),
    ]
    model = _chain_model(nodes, [helper.make_tensor_value_info("x", 1, [1, C, 6, 6])],
                         [helper.make_tensor_value_info("y", 1, [1, C, 6, 6])], inits)
    feeds = {"x": t(1, C, 6, 6)}
    got, _ = run_cpu(rt, model, feeds)
    np.testing.assert_allclose(got[0], reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_concat_then_batchnorm_mul_add_relu_matches_reference(rt):
    """DenseNet's pattern: BN and per-channel Mul/Add after a Concat merge into one affine."""
    r = np.random.default_rng(4)
    t = lambda *s: r.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("s", t(6)), ("b", t(6)), ("m", t(6)), ("v", r.uniform(0.5, 2, 6).astype(np.float32)),
        ("k", t(6, 1, 1)), ("c", t(6, 1, 1)), ("w", t(5, 6, 1, 1))]]
    nodes = [
        helper.make_node("Concat", ["x1", "x2"], ["cat"], axis=1),
        helper.make_node("BatchNormalization", ["cat", "s", "b", "m", "v"], ["bn"]),
        helper.make_node("Mul", ["bn", "k"], ["mu"]),
        helper.make_node("Add", ["mu", "c"], ["ad"]),
        helper.make_node("Relu", ["ad"], ["re"]),
        helper.make_node("Conv", ["re", "w"], ["y"]),
    ]
    vi = lambda n, s: helper.make_tensor_value_info(n, 1, s)  # noqa: E731
    model = _chain_model(nodes, [vi("x1", [1, 2, 4, 4]), vi("x2", [1, 4, 4, 4])],
                         [vi("y", [1, 5, 4, 4])], inits)
    feeds = {"x1": t(1, 2, 4, 4), "x2": t(1, 4, 4, 4)}
    got, _ = run_cpu(rt, model, feeds)
    np.testing.assert_allclose(got[0], reference(model, feeds)[0], rtol=1e-4, atol=1e-5)


def test_symbolic_batch_runs_kernel_by_kernel_with_run_time_shapes(rt):
    r = np.random.default_rng(5)
    w = r.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    model = _chain_model(nodes, [helper.make_tensor_value_info("x", 1, ["N", 3, 8, 8])],
                         [helper.make_tensor_value_info("y", 1, ["N", 4])],
                         [numpy_helper.from_array(w, "w")])
    for n in (1, 3):
        feeds = {"x": r.uniform(-1, 1, (n, 3, 8, 8)).astype(np.float32)}
        got, _ = run_cpu(rt, model, feeds)
        np.testing.assert_allclose(got[0], reference(model, feeds)[0], rtol=1e-5, atol=1e-6)


def test_shape_computation_chain_matches_reference(rt):
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, computed on the backend at run time."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
             helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
             helper.make_node("Concat", ["d0u", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "i0"),
             numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    model = _chain_model(nodes, [helper.make_tensor_value_info("x", 1, ["B", 3, 4])],
                         [helper.make_tensor_value_info("y", 1, ["B", 12])], inits)
    feeds = {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}
    got, _ = run_cpu(rt, model, feeds)
    np.testing.assert_array_equal(got[0], reference(model, feeds)[0])
    assert onnx.checker.check_model(model) is None
