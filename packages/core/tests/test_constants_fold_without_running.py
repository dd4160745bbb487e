"""``Constant`` nodes with a numeric value and ``Identity`` of a constant become constants of
the plan at load without a kernel being built for them (nnplug.stages.folding._fold_known):
torch's exports write one per shared or reshaped weight, hundreds in a BERT. Their values
are the same as when they ran (checked against onnxruntime), and the assignment still says
where each would have run."""

import numpy as np
import onnx
import onnxruntime as ort
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper


def every_constant_form() -> onnx.ModelProto:
    """y = x * (every numeric Constant form, Identity'd once or twice) + Identity(weight),
    reshaped by a Constant's ints."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    nodes = [
        helper.make_node("Constant", [], ["c_tensor"], name="c_tensor",
                         value=numpy_helper.from_array(np.full((2, 3), 1.5, np.float32))),
        helper.make_node("Constant", [], ["c_float"], name="c_float", value_float=-0.25),
        helper.make_node("Constant", [], ["c_floats"], name="c_floats", value_floats=[1.0, 2.0, 3.0]),
        helper.make_node("Constant", [], ["c_int"], name="c_int", value_int=3),
        helper.make_node("Constant", [], ["c_ints"], name="c_ints", value_ints=[3, 2]),
        helper.make_node("Identity", ["w"], ["w1"], name="id_w"),
        helper.make_node("Identity", ["w1"], ["w2"], name="id_w1"),
        helper.make_node("Identity", ["c_tensor"], ["t1"], name="id_c"),
        helper.make_node("Cast", ["c_int"], ["c_int_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["x", "t1"], ["a"], name="mul_tensor"),
        helper.make_node("Mul", ["a", "c_float"], ["b"], name="mul_float"),
        helper.make_node("Mul", ["b", "c_floats"], ["c"], name="mul_floats"),
        helper.make_node("Mul", ["c", "c_int_f"], ["d"], name="mul_int"),
        helper.make_node("Add", ["d", "w2"], ["e"], name="add_w"),
        helper.make_node("Reshape", ["e", "c_ints"], ["y"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes, "constants", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FOLDED_WITHOUT_RUNNING = ["c_tensor", "c_float", "c_floats", "c_int", "c_ints", "id_w",
                          "id_w1", "id_c"]


def test_constant_forms_and_identities_fold_to_their_values_without_a_kernel():
    model = every_constant_form()
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    backend = NumpyBackend(ops={"Constant", "Identity", "Cast", "Mul", "Add", "Reshape"})
    with make_runtime(backend).load(model, backends=["numpy"]) as net:
        np.testing.assert_array_equal(net.run({"x": x})["y"], want)
        for name in FOLDED_WITHOUT_RUNNING + ["cast"]:
            assert net.assignment[name] == "numpy (folded)", (name, net.assignment)
    built = {n.name for subgraph, _ in backend.builds for n in subgraph.nodes}
    # the Cast of a constant still runs once on the backend; the rest is never built
    assert "cast" in built and not built & set(FOLDED_WITHOUT_RUNNING), built


def test_a_constant_no_backend_claims_is_still_folded_by_the_core():
    """A backend that does not take Constant or Identity loses nothing: their values need no
    kernel (before, such a model did not load on that backend alone)."""
    model = every_constant_form()
    x = np.ones((2, 3), np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    backend = NumpyBackend(ops={"Cast", "Mul", "Add", "Reshape"})
    with make_runtime(backend).load(model, backends=["numpy"]) as net:
        np.testing.assert_array_equal(net.run({"x": x})["y"], want)
        assert net.assignment["id_w"] == "core (folded)", net.assignment
        assert net.assignment["c_ints"] == "core (folded)", net.assignment


def test_a_string_constant_is_left_to_the_backends():
    """Only numeric values are taken as they are; a string Constant runs as any node."""
    nodes = [helper.make_node("Constant", [], ["s"], name="s",
                              value=helper.make_tensor("v", TensorProto.STRING, [1], [b"a"])),
             helper.make_node("Identity", ["x"], ["y"], name="id")]
    graph = helper.make_graph(
        nodes, "strings", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("s", TensorProto.STRING, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    backend = NumpyBackend(ops={"Identity", "Constant"})
    with make_runtime(backend).load(model, backends=["numpy"]) as net:
        out = net.run({"x": np.ones(1, np.float32)})
        assert out["s"].tolist() == [b"a"] or out["s"].tolist() == ["a"], out["s"]
    built = {n.name for subgraph, _ in backend.builds for n in subgraph.nodes}
    assert "s" in built, built
