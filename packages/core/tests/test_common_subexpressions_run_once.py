"""Nodes computing the same thing from the same inputs run once (nnplug.stages.cse): equal constants
under different names count as the same input, as BERT's per-layer attention masks have them;
what could differ (attributes, constant values down to the sign of zero, random ops, custom
ops, graph outputs, values a subgraph reads) is left alone. Results match onnxruntime."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

from nnplug.stages.cse import merge_common_subexpressions
from nnplug.stages.loader import load

OPS = ["Where", "Add", "Mul", "Relu", "Equal", "Sigmoid", "Identity", "Expand"]
R = np.random.default_rng(5)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def model_of(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def ort_run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def built_nodes(backend):
    return [n.name for sg, _ in backend.builds for n in sg.nodes]


def masked_layers(layers=3, neg=-1e4, vary=None):
    """BERT's pattern: each layer adds Where(mask, 0, neg) to its scores, with constants of
    its own name; ``vary``: the layer whose neg constant differs (by its value)."""
    nodes, inits = [], []
    x = "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(np.array(0.0, np.float32), f"zero{i}"),
                  numpy_helper.from_array(np.array(neg if i != vary else neg * 2, np.float32), f"neg{i}")]
        nodes += [helper.make_node("Where", ["mask", f"zero{i}", f"neg{i}"], [f"bias{i}"], name=f"where{i}"),
                  helper.make_node("Add", [x, f"bias{i}"], [f"s{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"s{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
           helper.make_tensor_value_info("mask", TensorProto.BOOL, [2, 5])]
    outs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 5])]
    return model_of(nodes, ins, outs, inits)


def feeds_for_mask():
    return {"x": f32(2, 5), "mask": R.random((2, 5)) > 0.4}


def test_repeated_mask_runs_once_and_matches_onnxruntime():
    model, feeds = masked_layers(), feeds_for_mask()
    backend = NumpyBackend(ops=OPS)
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run(feeds)["r2"]
        ran = built_nodes(backend)
        assert ran.count("where0") == 1 and "where1" not in ran and "where2" not in ran, ran
        assert all(net.assignment[f"where{i}"] == "numpy" for i in range(3))
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_a_different_constant_value_is_not_merged():
    model, feeds = masked_layers(vary=1), feeds_for_mask()
    backend = NumpyBackend(ops=OPS)
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run(feeds)["r2"]
        ran = built_nodes(backend)
    assert "where0" in ran and "where1" in ran and "where2" not in ran, ran
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_negative_zero_is_not_zero():
    """Where(mask, 0.0, 1) and Where(mask, -0.0, 1) differ (1 / y tells them apart)."""
    nodes = [helper.make_node("Where", ["mask", "pz", "one"], ["a"], name="pos"),
             helper.make_node("Where", ["mask", "nz", "one"], ["b"], name="neg"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    inits = [numpy_helper.from_array(np.array(0.0, np.float32), "pz"),
             numpy_helper.from_array(np.array(-0.0, np.float32), "nz"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    m = load(model_of(nodes, [helper.make_tensor_value_info("mask", TensorProto.BOOL, [3])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])], inits))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == {} and [n.name for n in kept] == ["pos", "neg", "add"]


@pytest.mark.parametrize("differ_at", [None, 5000, 0, 9999])
def test_large_constants_merge_only_when_every_byte_is_equal(differ_at):
    """Weights are told apart by their sampled bytes first; equal samples (element 5000 lies
    between the sampled bytes) are compared whole."""
    w = np.linspace(-1, 1, 10000, dtype=np.float32)
    w2 = w.copy()
    if differ_at is not None:
        w2[differ_at] = np.nextafter(w2[differ_at], np.float32(2))
    nodes = [helper.make_node("Mul", ["x", "w"], ["a"], name="first"),
             helper.make_node("Mul", ["x", "w2"], ["b"], name="second"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    m = load(model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10000])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [10000])],
                      [numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")]))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == ({"second": "first"} if differ_at is None else {})



def test_large_constants_alike_in_samples_merge_by_their_whole_bits():
    """Of four weights whose sampled bytes are all equal, the two equal ones merge; one that
    differs only between the samples, and one whose zero there is -0.0, keep their nodes."""
    w = np.linspace(-1, 1, 10001, dtype=np.float32)  # w[5000] is 0.0
    other, signed = w.copy(), w.copy()
    other[5000] = np.float32(0.5)
    signed[5000] = np.float32(-0.0)
    inits = {"w": w, "same": w.copy(), "other": other, "signed": signed}
    nodes = [helper.make_node("Mul", ["x", name], [f"m_{name}"], name=f"mul_{name}")
             for name in inits]
    nodes += [helper.make_node("Sum", [f"m_{name}" for name in inits], ["y"], name="sum")]
    vi = [helper.make_tensor_value_info(v, TensorProto.FLOAT, [10001]) for v in ("x", "y")]
    m = load(model_of(nodes, vi[:1], vi[1:],
                      [numpy_helper.from_array(a, name) for name, a in inits.items()]))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == {"mul_same": "mul_w"}
    assert [n.name for n in kept] == ["mul_w", "mul_other", "mul_signed", "sum"]

def test_attributes_must_match():
    nodes = [helper.make_node("Softmax", ["x"], ["a"], name="s0", axis=0),
             helper.make_node("Softmax", ["x"], ["b"], name="s1", axis=1),
             helper.make_node("Softmax", ["x"], ["c"], name="s2", axis=1),
             helper.make_node("Sum", ["a", "b", "c"], ["y"], name="sum")]
    m = load(model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])]))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == {"s2": "s1"}
    assert kept[-1].inputs == ["a", "b", "b"] and list(kept[-1].proto.input) == ["a", "b", "b"]


def test_chains_merge_and_random_ops_do_not():
    """Relu(Sigmoid(x)) twice is one chain; two RandomUniformLike(x) stay two."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["a0"], name="sig0"),
             helper.make_node("Relu", ["a0"], ["b0"], name="relu0"),
             helper.make_node("Sigmoid", ["x"], ["a1"], name="sig1"),
             helper.make_node("Relu", ["a1"], ["b1"], name="relu1"),
             helper.make_node("RandomUniformLike", ["x"], ["u0"], name="rnd0"),
             helper.make_node("RandomUniformLike", ["x"], ["u1"], name="rnd1"),
             helper.make_node("Sum", ["b0", "b1", "u0", "u1"], ["y"], name="sum")]
    m = load(model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])]))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == {"sig1": "sig0", "relu1": "relu0"}
    assert [n.name for n in kept] == ["sig0", "relu0", "rnd0", "rnd1", "sum"]
    assert kept[-1].inputs == ["b0", "b0", "u0", "u1"]


def test_graph_outputs_keep_their_nodes():
    nodes = [helper.make_node("Relu", ["x"], ["y0"], name="r0"),
             helper.make_node("Relu", ["x"], ["y1"], name="r1")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                     [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [3]),
                      helper.make_tensor_value_info("y1", TensorProto.FLOAT, [3])])
    backend = NumpyBackend(ops=OPS)
    x = f32(3)
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run({"x": x})
    assert sorted(built_nodes(backend)) == ["r0", "r1"]
    np.testing.assert_array_equal(got["y0"], np.maximum(x, 0))
    np.testing.assert_array_equal(got["y1"], np.maximum(x, 0))


def test_values_a_subgraph_reads_are_not_renamed():
    """An If branch reads outer value a1 by name: its producer, the same as a0's, stays."""
    then_g = helper.make_graph([helper.make_node("Identity", ["a1"], ["t"], name="then_id")], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [3])])
    else_g = helper.make_graph([helper.make_node("Identity", ["a0"], ["e"], name="else_id")], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [3])])
    nodes = [helper.make_node("Relu", ["x"], ["a0"], name="r0"),
             helper.make_node("Relu", ["x"], ["a1"], name="r1"),
             helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
                             helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    m = load(model)
    from nnplug.graph import attach_outer_inputs
    from nnplug.stages.expand import expand_unclaimed
    expanded = expand_unclaimed(m, lambda n, g: True, {})
    attach_outer_inputs(expanded.nodes)
    kept, merged = merge_common_subexpressions(expanded.nodes, expanded.constants, {"y"}, {})
    assert merged == {} and [n.name for n in kept] == ["r0", "r1", "if"]
    backend = NumpyBackend(ops=OPS)
    x = f32(3)
    with make_runtime(backend) as rt, rt.load(model) as net:
        for c in (True, False):
            np.testing.assert_array_equal(net.run({"x": x, "c": np.array(c)})["y"], np.maximum(x, 0))


def test_custom_ops_run_every_time():
    """A Python op that overrides Relu may keep state: two Relu(x) nodes call it twice."""

    class CountingRelu:
        op_type = "Relu"

        def __init__(self):
            self.calls = []

        def shape_infer(self, node, in_shapes, in_dtypes):
            return [in_shapes[0]], [in_dtypes[0]]

        def compute(self, node, inputs):
            self.calls.append(node.name)
            return [np.maximum(inputs[0], 0)]

    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"),
             helper.make_node("Relu", ["x"], ["b"], name="r1"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    model = model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    op = CountingRelu()
    x = f32(3)
    with make_runtime(NumpyBackend(ops=OPS)) as rt:
        rt.register_custom_op(op, override=True)
        with rt.load(model) as net:
            np.testing.assert_array_equal(net.run({"x": x})["y"], 2 * np.maximum(x, 0))
    assert sorted(op.calls) == ["r0", "r1"]


@pytest.mark.parametrize("level,runs", [("disable", 3), ("basic", 1), ("all", 1)])
def test_optimization_levels(level, runs):
    model, feeds = masked_layers(), feeds_for_mask()
    backend = NumpyBackend(ops=OPS)
    with make_runtime(backend) as rt, rt.load(model, optimization=level) as net:
        got = net.run(feeds)["r2"]
    ran = built_nodes(backend)
    assert sum(n.startswith("where") for n in ran) == runs, ran
    np.testing.assert_array_equal(got, ort_run(model, feeds)[0])


def test_multi_output_nodes_merge_output_by_output():
    """Split with both outputs named on both nodes is merged, each output to its own."""
    nodes = [helper.make_node("Split", ["x"], ["p0", "q0"], name="sp0", axis=0, num_outputs=2),
             helper.make_node("Split", ["x"], ["p1", "q1"], name="sp1", axis=0, num_outputs=2),
             helper.make_node("Sum", ["p0", "q1"], ["y"], name="sum")]
    m = load(model_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], opset=18))
    kept, merged = merge_common_subexpressions(m.nodes, m.constants, {"y"}, {})
    assert merged == {"sp1": "sp0"} and kept[-1].inputs == ["p0", "q0"]


def test_proto_of_rewritten_node_is_valid_onnx():
    """The reader of a merged value is rewritten with its proto, which ONNX still checks."""
    model, _ = masked_layers(), None
    m = load(model)
    kept, _ = merge_common_subexpressions(m.nodes, m.constants, {"r2"}, {})
    g = helper.make_graph([n.proto for n in kept], "g", list(model.graph.input), list(model.graph.output),
                          list(model.graph.initializer))
    onnx.checker.check_model(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_casts_to_their_inputs_own_type_are_dropped():
    """torch writes Cast(to=float) of float values around softmax and RMS normalizations: such a
    Cast is an Identity and runs no kernel; a Cast that changes the type, and one writing a
    graph output from a graph input, still run. Results match onnxruntime, NaN included."""
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
             helper.make_node("Cast", ["s"], ["c0"], name="same0", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["c0"], ["c1"], name="same1", to=TensorProto.FLOAT),
             helper.make_node("Mul", ["c1", "x"], ["y"], name="mul"),
             helper.make_node("Cast", ["y"], ["h"], name="narrow", to=TensorProto.FLOAT16),
             helper.make_node("Cast", ["h"], ["z"], name="wide", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["x"], ["x2"], name="of_input", to=TensorProto.FLOAT)]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 5]),
            helper.make_tensor_value_info("x2", TensorProto.FLOAT, [2, 5])]
    model = model_of(nodes, ins, outs)
    feeds = {"x": f32(2, 5)}
    feeds["x"][1, 2] = np.nan
    backend = NumpyBackend(ops=OPS + ["Cast"])
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run(feeds)
        ran = built_nodes(backend)
    assert "same0" not in ran and "same1" not in ran, ran
    assert {"narrow", "wide", "of_input"} <= set(ran), ran
    for name, want in zip(["y", "z", "x2"], ort_run(model, feeds)):  # numpy's sigmoid: an ulp
        np.testing.assert_allclose(got[name], want, rtol=1e-6, atol=0, equal_nan=True)
