"""The precision hint reaches a backend through its Target's ``precision`` attribute, when its
Target kind declares one: from the session config entry ``nnplug.precision``, else from
NNPLUG_PRECISION; a Target that sets it keeps its own value; a backend that declares none is
left alone and said to ignore it; an unknown value is refused naming the values."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from onnx import TensorProto, helper
from reference_backend import ReferenceBackend

import nnplug


class Hinted(ReferenceBackend):
    id = "hinted"
    built_with: list[str] = []

    def target_kind(self):
        return {"device_type": "cpu", "attrs": {"precision": (str, "f32")}}

    def supports(self, node, graph):
        return node.op_type == "Relu"

    def build(self, subgraph, target):
        Hinted.built_with.append(target.attrs["precision"])
        return super().build(subgraph, target)


class Plain(ReferenceBackend):
    id = "plain"


def model():
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def rt(monkeypatch):
    monkeypatch.delenv("NNPLUG_PRECISION", raising=False)
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(Hinted)
    r.register_backend(Plain)
    Hinted.built_with.clear()
    yield r
    r.close()


def session(rt, precision=None, providers=("hinted", "plain")):
    so = nnplug.SessionOptions()
    if precision is not None:
        so.add_session_config_entry("nnplug.precision", precision)
    s = nnplug.InferenceSession(model(), so, providers=list(providers), runtime=rt)
    assert s.run(None, {"x": np.array([-1, 0, 2], np.float32)})[0].tolist() == [0, 0, -2]
    return s


def test_without_a_hint_the_target_default_is_kept(rt):
    session(rt)
    assert Hinted.built_with == ["f32"]


def test_the_session_config_entry_reaches_the_target(rt, caplog):
    with caplog.at_level(logging.INFO, logger="nnplug"):
        session(rt, "bf16")
    assert Hinted.built_with == ["bf16"]
    said = [r.getMessage() for r in caplog.records if "ignores" in r.getMessage()]
    assert said == ["backend 'plain' ignores nnplug.precision=bf16: its Target kind has no "
                    "'precision' attribute, it runs the model in the types it is written in"]


def test_the_environment_gives_it_to_every_load_and_the_session_entry_wins(rt, monkeypatch):
    monkeypatch.setenv("NNPLUG_PRECISION", "bf16")
    rt.load(model(), backends=["hinted", "plain"]).close()
    session(rt, "f32")
    assert Hinted.built_with == ["bf16", "f32"]


def test_a_target_that_sets_it_keeps_its_own(rt):
    session(rt, "bf16", providers=[("hinted", {"precision": "f32"}), "plain"])
    assert Hinted.built_with == ["f32"]


def test_an_unknown_hint_is_refused(rt, monkeypatch):
    with pytest.raises(nnplug.InvalidArgumentError, match=r"nnplug.precision='f8'.*f32, bf16"):
        session(rt, "f8")
    monkeypatch.setenv("NNPLUG_PRECISION", "half")
    with pytest.raises(nnplug.InvalidArgumentError, match=r"NNPLUG_PRECISION='half'"):
        rt.load(model(), backends=["plain"])
