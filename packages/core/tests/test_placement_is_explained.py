"""A network says, per node, where it runs and why every backend tried before declined it."""

from models import mlp
from numpy_backend import NumpyBackend, make_runtime


class Picky(NumpyBackend):
    """Runs MatMul only, and says why it declines the rest."""

    def decline_reason(self, node, graph):
        return f"{node.op_type} is not a MatMul"


def test_each_node_names_where_it_ran_and_who_declined_it_and_why():
    with make_runtime(Picky(ops={"MatMul"}, id="picky"), NumpyBackend(id="plain",
                      ops={"Add", "Relu"}), NumpyBackend(id="full")) as rt:
        net = rt.load(mlp(), backends=["picky", "plain", "full"])
        p = net.placement
        assert p["matmul"] == {"op": "MatMul", "ran_on": "picky", "declined": {}}
        assert p["add"]["ran_on"] == "plain"
        assert p["add"]["declined"] == {"picky": "Add is not a MatMul"}
        text = net.explain_placement()
        assert "relu: plain\n    declined by picky: Relu is not a MatMul" in text


def test_a_backend_without_a_reason_is_said_not_to_support_the_node():
    with make_runtime(NumpyBackend(id="partial", ops={"MatMul"}), NumpyBackend(id="full")) as rt:
        net = rt.load(mlp(), backends=["partial", "full"])
        assert net.placement["relu"]["declined"] == {"partial": "does not support it"}
        assert set(net.placement) == set(net.assignment)
