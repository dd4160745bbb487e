"""supports_fused: a backend that declines a node alone may claim it with the next node, the
only reader of its outputs (moved up to follow it where its other inputs allow); the two then
stay in one partition and one build, whatever the optimization level, and every other such
node goes to the next backend."""

import numpy as np
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto, helper


class PairBackend(NumpyBackend):
    """Runs Relu, Add and Mul, and Less only together with the Where reading it."""

    def __init__(self):
        super().__init__(ops={"Relu", "Add", "Mul"}, id="pair")
        self.asked = []

    def supports_fused(self, nodes, graph):
        self.asked.append([n.op_type for n in nodes])
        return [n.op_type for n in nodes] == ["Less", "Where"]


def model(extra_output=False, between=False, where_reads_between=False):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Less", ["r", "t"], ["c"], name="less")]
    if between:
        nodes.append(helper.make_node("Add", ["r", "r"], ["r2"], name="between"))
    nodes += [helper.make_node("Where", ["c", "t", "r2" if where_reads_between else "r"], ["w"],
                               name="where"),
              helper.make_node("Mul", ["w", "w"], ["y"], name="mul")]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])]
    if extra_output:
        outs.append(helper.make_tensor_value_info("c", TensorProto.BOOL, [2, 3]))
    if between:
        outs.append(helper.make_tensor_value_info("r2", TensorProto.FLOAT, [2, 3]))
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
           helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])]
    return helper.make_model(helper.make_graph(nodes, "g", ins, outs),
                             opset_imports=[helper.make_opsetid("", 18)])


FEEDS = {"x": np.array([[-1, 0.5, 2], [3, -4, 0.25]], np.float32),
         "t": np.full((2, 3), 1.0, np.float32)}


def want():
    r = np.maximum(FEEDS["x"], 0)
    w = np.where(r < FEEDS["t"], FEEDS["t"], r)
    return w * w


@pytest.mark.parametrize("optimization", ["all", "basic"])
def test_a_pair_claimed_together_is_one_build(optimization):
    pair = PairBackend()
    with make_runtime(pair, NumpyBackend(id="full", ops=set(KERNELS))) as rt:
        with rt.load(model(), backends=["pair", "full"], optimization=optimization) as net:
            assert set(net.assignment.values()) == {"pair"}, net.assignment
            np.testing.assert_array_equal(net.run(FEEDS)["y"], want())
    built = [[n.name for n in sg.nodes] for sg, _ in pair.builds]
    if optimization == "all":
        assert built == [["relu", "less", "where", "mul"]]
    else:
        assert built == [["relu"], ["less", "where"], ["mul"]]


def test_no_pair_when_the_value_is_also_a_graph_output():
    pair = PairBackend()
    with make_runtime(pair, NumpyBackend(id="full", ops=set(KERNELS))) as rt:
        with rt.load(model(extra_output=True), backends=["pair", "full"]) as net:
            assert net.assignment["less"] == net.assignment["where"] == "full", net.assignment
            got = net.run(FEEDS)
    np.testing.assert_array_equal(got["y"], want())
    assert ["Less", "Where"] not in pair.asked


def test_a_reader_written_after_another_node_is_moved_up_and_claimed_with_its_writer():
    """relu, less, between, where: where reads nothing between makes, so it follows less and
    the two are asked about together (a QDQ model's branches interleave their pairs so)."""
    pair = PairBackend()
    with make_runtime(pair, NumpyBackend(id="full", ops=set(KERNELS))) as rt:
        with rt.load(model(between=True), backends=["pair", "full"]) as net:
            assert net.assignment["less"] == net.assignment["where"] == "pair", net.assignment
            np.testing.assert_array_equal(net.run(FEEDS)["y"], want())
    assert ["Less", "Where"] in pair.asked


def test_no_pair_when_the_reader_also_reads_what_a_node_between_makes():
    pair = PairBackend()
    with make_runtime(pair, NumpyBackend(id="full", ops=set(KERNELS))) as rt:
        with rt.load(model(between=True, where_reads_between=True),
                     backends=["pair", "full"]) as net:
            assert net.assignment["less"] == net.assignment["where"] == "full", net.assignment
            r = np.maximum(FEEDS["x"], 0)
            w = np.where(r < FEEDS["t"], FEEDS["t"], r + r)
            np.testing.assert_array_equal(net.run(FEEDS)["y"], w * w)
    assert ["Less", "Where"] not in pair.asked


def test_no_pair_when_a_custom_op_runs_the_reader():
    """A Python op overriding Where runs every Where: the pair is not offered, and Less goes to
    the backend that runs it alone."""
    calls = []

    class MyWhere:
        op_type = "Where"

        def shape_infer(self, node, in_shapes, in_dtypes):
            return [in_shapes[1]], [in_dtypes[1]]

        def compute(self, node, inputs):
            calls.append(node.name)
            return [np.where(*inputs)]

    pair = PairBackend()
    with make_runtime(pair, NumpyBackend(id="full", ops=set(KERNELS))) as rt:
        rt.register_custom_op(MyWhere(), override=True)
        with rt.load(model(), backends=["pair", "full"]) as net:
            assert net.assignment["less"] == "full" and net.assignment["where"].startswith("op:"), net.assignment
            np.testing.assert_array_equal(net.run(FEEDS)["y"], want())
    assert calls == ["where"] and ["Less", "Where"] not in pair.asked
