"""A partition whose every shape follows from its inputs' symbols (a symbolic batch through
products and elementwise ops; an output's dims no symbol names, where its ops make shapes from
shapes alone, taken from the first run) runs a shape's first run through ``run_dynamic``, where the
backend's reported shapes and the outputs are checked against the model, and every later run
of that shape on a static plan made then: one ``run_steps`` call, arena and outputs allocated by
the host, no callback (the fixed cost of a static model). Up to MAX_FIXED_PLANS shapes a
partition; the rest, empty batches and partitions whose shapes depend on data (a Reshape to a
shape given at run time) keep run_dynamic. Same bits either way (concurrent runs of several
shapes: test_dynamic_partitions_run_in_one_native_call.py)."""

from __future__ import annotations

import numpy as np
import pytest
from nativelib import bare_runtime
from onnx import TensorProto, helper, numpy_helper
from test_a_static_host_run_has_a_small_fixed_cost import python_calls
from test_end_to_end import mlp, reference

from nnplug.native.plan import MAX_FIXED_PLANS


def batch_mlp(out_dim="N"):
    """x[N, 8] -> MatMul -> Add -> Relu -> MatMul -> Add -> y[N, 6]."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((16, 6)).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(6).astype(np.float32), "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Relu", ["a1"], ["r1"], name="relu1"),
             helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "b2"], ["y"], name="add2")]
    g = helper.make_graph(nodes, "batch_mlp",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [out_dim, 6])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def x_of(batch, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 8)).astype(np.float32)


def calls(stats, name, net, feeds):
    """net's output y for feeds, and the native calls of backend name it took."""
    before = stats(name)
    out = net.run(feeds)["y"]
    after = stats(name)
    return out, {k: after[k] - before[k] for k in ("run_dynamic", "run_steps")}


def test_a_shapes_second_run_is_one_run_steps_call_with_the_same_bits(libs, stats):
    model = batch_mlp()
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for batch in (3, 1, 5):
                x = x_of(batch, seed=batch)
                first, n1 = calls(stats, "testcpu", net, {"x": x})
                again, n2 = calls(stats, "testcpu", net, {"x": x})
                assert n1 == {"run_dynamic": 1, "run_steps": 0}
                assert n2 == {"run_dynamic": 0, "run_steps": 1}
                np.testing.assert_array_equal(first, again)
                np.testing.assert_allclose(again, reference(model, {"x": x}),
                                           rtol=1e-5, atol=1e-5)


def test_a_static_plans_run_makes_no_more_python_calls_than_a_static_models(libs):
    x = x_of(2)
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(batch_mlp()) as sym, rt.load(_static(batch_mlp(), 2)) as fixed:
            for _ in range(2):
                sym.run({"x": x})
                fixed.run({"x": x})
            assert python_calls(lambda: sym.run({"x": x})) <= \
                python_calls(lambda: fixed.run({"x": x})) + 2


def _static(model, batch):
    m = type(model)()
    m.CopyFrom(model)
    for v in (*m.graph.input, *m.graph.output):
        v.type.tensor_type.shape.dim[0].dim_value = batch
    return m


def test_shapes_beyond_the_kept_plans_and_empty_batches_run_dynamic(libs, stats):
    model = batch_mlp()
    batches = list(range(1, MAX_FIXED_PLANS + 4))
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for b in batches:  # first runs: every one dynamic
                net.run({"x": x_of(b, seed=b)})
            for b in [*batches, 0]:
                x = x_of(b, seed=b)
                got, n = calls(stats, "testcpu", net, {"x": x})
                planned = 1 <= b <= MAX_FIXED_PLANS
                assert n == {"run_dynamic": 0 if planned else 1, "run_steps": int(planned)}, b
                np.testing.assert_allclose(got, reference(model, {"x": x}),
                                           rtol=1e-5, atol=1e-5)


def test_shapes_that_do_not_follow_from_the_inputs_keep_run_dynamic(libs, stats):
    model = mlp(batch="N", runtime_shape=True)  # a Reshape to a shape fed at run time
    feeds = {"x": x_of(4), "shape": np.array([-1, 3], np.int64)}
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for _ in range(3):
                got, n = calls(stats, "testcpu", net, feeds)
                assert n == {"run_dynamic": 1, "run_steps": 0}
    np.testing.assert_allclose(got, reference(model, feeds), rtol=1e-5, atol=1e-5)


def one_node(op, dims, extra=()):
    """op(x[dims], *extra) -> y, x's and y's dims as given (None: unnamed, as skl2onnx writes
    a batch)."""
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)]
    inputs += [helper.make_tensor_value_info(n, TensorProto.INT64, [2]) for n in extra]
    g = helper.make_graph([helper.make_node(op, ["x", *extra], ["y"], name="the_node")], "one",
                          inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("model", [one_node("Relu", [None, 8]), batch_mlp("M")],
                         ids=["unnamed_batch", "output_symbol_of_its_own"])
def test_an_output_no_input_symbol_sizes_takes_its_shape_from_the_first_run(libs, stats,
                                                                            model):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for b in (2, 5, 2, 5):
                x = x_of(b, seed=b) - 0.5
                got, n = calls(stats, "testcpu", net, {"x": x})
                np.testing.assert_allclose(got, reference(model, {"x": x}), rtol=1e-5,
                                           atol=1e-5)
            assert n == {"run_dynamic": 0, "run_steps": 1}


def test_a_shape_made_from_data_is_never_learned(libs, stats):
    """Reshape to a shape fed at run time: the same input shapes, other output shapes."""
    model = one_node("Reshape", [None, 8], extra=["shape"])
    x = x_of(4)
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for shape in ([8, 4], [8, 4], [2, 16], [32, 1], [8, 4]):
                feeds = {"x": x, "shape": np.array(shape, np.int64)}
                got, n = calls(stats, "testcpu", net, feeds)
                assert got.shape == tuple(shape)
                np.testing.assert_array_equal(got, x.reshape(shape))
                assert n == {"run_dynamic": 1, "run_steps": 0}


def test_a_value_made_inside_with_an_unnamed_batch_is_sized_by_a_kernel_by_kernel_first_run(
        libs, stats):
    """Relu then Add on [None, 8]: the Relu's result has no dim a symbol sizes and is read
    inside the partition, so a shape's first run goes kernel by kernel (its shapes asked and
    checked), and the plan made from it runs the later ones."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Add", ["r", "x"], ["y"], name="add")]
    g = helper.make_graph(nodes, "two", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                       [None, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 8])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for b in (3, 3, 6, 6, 3):
                x = x_of(b, seed=b) - 0.5
                before = stats("testcpu")
                got = net.run({"x": x})["y"]
                after = stats("testcpu")
                np.testing.assert_array_equal(got, np.maximum(x, 0) + x)
            assert after["run_steps"] - before["run_steps"] == 1
            assert after["run_dynamic"] == before["run_dynamic"]
