"""The expand stage splices a body into the model without reading it again, and infers only
what the body adds. ONNX names the dims it cannot size (``unk__0``, ...) afresh in every
inference run, and a symbolic dim is one size wherever it appears, so the dims of the body's
values are renamed apart from those the read stage gave the rest of the model: two values
of different sizes never share a symbol (the run would refuse a right answer)."""

from __future__ import annotations

import numpy as np
import pytest
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h

DOMAIN = "com.example"


# outputs of unknown rank (what NonZero makes is inferred, not declared): the checker's finding
@pytest.mark.filterwarnings("ignore::nnplug.ModelWarning")
def test_a_plugin_ops_body_and_the_rest_of_the_model_do_not_share_a_symbol(monkeypatch):
    monkeypatch.setitem(KERNELS, "NonZero", lambda node, x: np.array(np.nonzero(x)))
    body = h.make_function(DOMAIN, "Where1", ["X"], ["Y"], [h.make_node("NonZero", ["X"], ["Y"])],
                           [h.make_opsetid("", 17)])
    nodes = [h.make_node("Where1", ["x"], ["c"], domain=DOMAIN, name="plugin_op"),
             h.make_node("NonZero", ["y"], ["b"], name="nz")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4]),
                                  h.make_tensor_value_info("y", T.FLOAT, [5])],
                     [h.make_tensor_value_info("c", T.INT64, None),
                      h.make_tensor_value_info("b", T.INT64, None)])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17), h.make_opsetid(DOMAIN, 1)])
    x = np.array([1, 0, 1, 1], np.float32)
    y = np.array([1, 0, 0, 0, 1], np.float32)
    with make_runtime(NumpyBackend(ops=set(KERNELS))) as rt:
        rt.register_function(body)
        with rt.load(model) as net:
            assert net.assignment == {"plugin_op/NonZero_0": "numpy", "nz": "numpy"}
            got = net.run({"x": x, "y": y})  # one partition: its outputs checked together
    np.testing.assert_array_equal(got["c"], np.array(np.nonzero(x)))
    np.testing.assert_array_equal(got["b"], np.array(np.nonzero(y)))
