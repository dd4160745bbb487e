"""An Identity computes what it reads, so the merge stage drops it (nnplug.stages.cse): its
readers read its input, or, when it writes a graph output, its input's producer writes that
output itself. Kept: an Identity of a graph input, one whose input has other readers or is a
graph output too, one whose output a subgraph reads. Results match onnxruntime."""

import numpy as np
import onnxruntime as ort
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper

R = np.random.default_rng(11)
OPS = ["Relu", "Identity", "Sigmoid", "Tanh"]


def model_of(nodes, outputs, inputs=("x",)):
    ins = [helper.make_tensor_value_info(i, TensorProto.FLOAT, [2, 3]) for i in inputs]
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs]
    graph = helper.make_graph(nodes, "g", ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_both(model, feeds):
    backend = NumpyBackend(ops=OPS)
    with make_runtime(backend) as rt, rt.load(model) as net:
        got = net.run(feeds)
        ran = [n.name for sg, _ in backend.builds for n in sg.nodes]
        assignment = dict(net.assignment)
    ref = ort.InferenceSession(model.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feeds)
    names = [o.name for o in model.graph.output]
    for name, r in zip(names, ref):
        np.testing.assert_allclose(got[name], r, rtol=1e-6, atol=1e-7, err_msg=name)
    return ran, assignment


def feeds():
    return {"x": R.standard_normal((2, 3)).astype(np.float32)}


def test_an_identity_between_two_nodes_is_dropped():
    model = model_of([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                      helper.make_node("Identity", ["a"], ["b"], name="id"),
                      helper.make_node("Sigmoid", ["b"], ["y"], name="neg")], ["y"])
    ran, assignment = run_both(model, feeds())
    assert "id" not in ran and {"relu", "neg"} <= set(ran), ran
    assert assignment["id"] == assignment["relu"]  # said to run where its input is made


def test_an_identity_writing_a_graph_output_is_written_by_its_producer():
    model = model_of([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                      helper.make_node("Identity", ["a"], ["y"], name="id")], ["y"])
    ran, _ = run_both(model, feeds())
    assert ran == ["relu"], ran


def test_chained_identities_to_a_graph_output_are_all_dropped():
    model = model_of([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                      helper.make_node("Identity", ["a"], ["b"], name="id1"),
                      helper.make_node("Identity", ["b"], ["y"], name="id2")], ["y"])
    ran, _ = run_both(model, feeds())
    assert ran == ["relu"], ran


def test_an_identity_whose_input_is_read_elsewhere_or_is_an_output_stays():
    model = model_of([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                      helper.make_node("Identity", ["a"], ["y"], name="id"),
                      helper.make_node("Sigmoid", ["a"], ["z"], name="neg")], ["y", "z"])
    ran, _ = run_both(model, feeds())
    assert "id" in ran, ran
    model = model_of([helper.make_node("Relu", ["x"], ["a"], name="relu"),
                      helper.make_node("Identity", ["a"], ["y"], name="id")], ["a", "y"])
    ran, _ = run_both(model, feeds())
    assert "id" in ran, ran


def test_an_identity_of_a_graph_input_stays():
    model = model_of([helper.make_node("Identity", ["x"], ["y"], name="id")], ["y"])
    ran, _ = run_both(model, feeds())
    assert ran == ["id"], ran


def test_an_identity_whose_output_a_subgraph_reads_stays():
    # the branches read "b" by name from the outer graph: it must keep its name and value
    branch = lambda name, op: helper.make_graph(  # noqa: E731
        [helper.make_node(op, ["b"], [f"{name}_out"], name=f"{name}_op")], name, [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Identity", ["a"], ["b"], name="id"),
             helper.make_node("If", ["cond"], ["y"], name="if",
                              then_branch=branch("then", "Sigmoid"),
                              else_branch=branch("else", "Tanh"))]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
           helper.make_tensor_value_info("cond", TensorProto.BOOL, [])]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    graph = helper.make_graph(nodes, "g", ins, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for cond in (True, False):
        f = {**feeds(), "cond": np.array(cond)}
        ran, _ = run_both(model, f)
        assert "id" in ran, ran
