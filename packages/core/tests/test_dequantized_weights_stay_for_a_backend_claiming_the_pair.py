"""The fold stage leaves a DequantizeLinear of constants (a QDQ model's int8 weights) unfolded
when the place stage would put it together with the one node reading it: a backend declines
it alone and claims the two (supports_fused). The node then sits just before its reader and
the backend builds both, seeing the integers; every other backend, and optimization="basic",
gets the folded float weights as before."""

import numpy as np
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

W = np.array([[3, -7], [127, -128], [0, 5]], np.int8)
SCALE = np.float32(0.125)
X = np.array([[1.0, -2.0, 0.5]], np.float32)
WANT = np.maximum(X, 0) @ (W.astype(np.float32) * SCALE)


class PairBackend(NumpyBackend):
    """Runs Relu and MatMul, and DequantizeLinear only with the MatMul reading it."""

    def __init__(self):
        super().__init__(ops={"Relu", "MatMul"}, id="pair")

    def supports_fused(self, nodes, graph):
        return [n.op_type for n in nodes] == ["DequantizeLinear", "MatMul"]


def model():
    # the weights' DequantizeLinear first, as onnxruntime's quantize_static writes it
    nodes = [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], name="dq"),
             helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "wf"], ["y"], name="mm")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(SCALE, "s")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])


def full():
    return NumpyBackend(id="full", ops={"Relu", "MatMul", "DequantizeLinear"})


def test_a_backend_claiming_the_pair_gets_the_integer_weights():
    pair = PairBackend()
    with make_runtime(pair, full()) as rt, rt.load(model(), backends=["pair", "full"]) as net:
        assert net.assignment == {"dq": "pair", "relu": "pair", "mm": "pair"}, net.assignment
        np.testing.assert_array_equal(net.run({"x": X})["y"], WANT)
    (sg, _), = pair.builds
    assert [n.name for n in sg.nodes] == ["relu", "dq", "mm"]  # moved to just before its reader
    assert sg.constants["w"].dtype == np.int8 and "wf" not in sg.constants


@pytest.mark.parametrize("backends,optimization", [(["full"], "all"), (["full", "pair"], "all"),
                                                   (["pair", "full"], "basic")],
                         ids=["not-declared", "declared-by-a-later-backend", "basic"])
def test_otherwise_the_weights_are_folded(backends, optimization):
    runs = {"pair": PairBackend(), "full": full()}
    with make_runtime(*runs.values()) as rt, \
            rt.load(model(), backends=backends, optimization=optimization) as net:
        assert net.assignment["dq"] == "full (folded)", net.assignment
        np.testing.assert_array_equal(net.run({"x": X})["y"], WANT)
    built = [sg for b in runs.values() for sg, _ in b.builds if "mm" in [n.name for n in sg.nodes]]
    assert len(built) == 1 and built[0].constants["wf"].dtype == np.float32
    np.testing.assert_array_equal(built[0].constants["wf"], W.astype(np.float32) * SCALE)
