"""Creating a session takes a model through each stage once: it is read (``loader.load``)
once, although a function-bodied op is expanded and an If's branches are compiled through
the same stages (from what is known, not read again), and each backend is asked
``supports()`` at most once per node (the fold and place stages reuse what the expand stage
asked)."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
from numpy_backend import KERNELS, CountingBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

import nnplug
from nnplug.stages import loader


def _model():
    then_g = h.make_graph([h.make_node("Relu", ["hs"], ["t"], name="then_relu")], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [2, 3])])
    else_g = h.make_graph([h.make_node("Mul", ["hs", "x"], ["e"], name="else_mul")], "else", [],
                          [h.make_tensor_value_info("e", T.FLOAT, [2, 3])])
    nodes = [h.make_node("HardSigmoid", ["x"], ["hs"], name="act", alpha=0.3, beta=0.4),
             h.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                         else_branch=else_g)]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 3]),
                                  h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 3])])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _calls_of(fn, run):
    """How often ``fn``'s code runs during ``run()`` (under any name it is imported as)."""
    code, count = fn.__code__, [0]

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code is code:
            count[0] += 1

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(old)
    return count[0], result


def test_a_session_reads_the_model_once_and_asks_each_backend_once_per_node():
    model = _model()
    backend = CountingBackend(ops=set(KERNELS) - {"HardSigmoid"})
    with make_runtime(backend) as rt:
        reads, session = _calls_of(loader.load, lambda: nnplug.InferenceSession(model, runtime=rt))
        assignment = session.network.assignment
        # the op ran as its body, the If on the core with both branches on the backend
        assert "act" not in assignment and any(k.startswith("act/") for k in assignment)
        assert assignment["branch"] == "core"
        assert assignment["branch/then_branch/then_relu"] == "numpy"
        assert assignment["branch/else_branch/else_mul"] == "numpy"
        assert reads == 1
        twice = {name: n for name, n in backend.asked.items() if n > 1}
        assert twice == {}, twice
        assert {"act", "branch", "then_relu", "else_mul"} <= set(backend.asked)
        x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32) * 4
        ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        for c in (True, False):
            feeds = {"x": x, "c": np.array(c)}
            np.testing.assert_allclose(session.run(None, feeds)[0], ref.run(None, feeds)[0],
                                       rtol=1e-6, atol=1e-6)
