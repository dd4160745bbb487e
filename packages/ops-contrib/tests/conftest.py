"""One-node models of com.microsoft ops, run by onnxruntime (the reference) and by nnplug with
the bodies this package registers, on the backends the test names."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

import nnplug

BACKEND_ORDERS = [["cpu"], ["onednn", "cpu"]]
"""Every body runs on the portable backend alone and behind onednn (which declines what it
does not run, for cpu to take)."""


def model_of(op_type, inputs, outputs, attrs=None, domain="com.microsoft", opset=17,
             initializers=()):
    """A one-node model; ``inputs``: (name, array) feeds, None for an omitted input, or
    (name, array, True) for an initializer. ``outputs``: names (types left to ORT)."""
    names, graph_inputs, inits = [], [], []
    for x in inputs:
        if x is None:
            names.append("")
            continue
        name, a = x[0], np.asarray(x[1])
        names.append(name)
        if len(x) > 2 and x[2]:
            inits.append(numpy_helper.from_array(a, name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(a.dtype), list(a.shape)))
    node = helper.make_node(op_type, names, list(outputs), name="node", domain=domain,
                            **(attrs or {}))
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs
            if o]
    g = helper.make_graph([node], "g", graph_inputs, outs, inits)
    opsets = [helper.make_opsetid("", opset)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 8
    feeds = {x[0]: np.asarray(x[1]) for x in inputs if x is not None and not (len(x) > 2 and x[2])}
    return m, feeds


def run_ort(model, feeds):
    import onnxruntime as ort

    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feeds)))


@pytest.fixture(scope="session")
def runtime():
    rt = nnplug.Runtime()
    assert ("com.microsoft", "Attention") in rt.functions, rt.load_errors
    yield rt
    rt.close()


@pytest.fixture(params=BACKEND_ORDERS, ids=lambda o: "+".join(o))
def backends(request, runtime):
    missing = [b for b in request.param if b not in runtime.backends]
    if missing:
        pytest.skip(f"backend(s) {missing} not installed")
    return request.param


@pytest.fixture
def run_nnplug(runtime, backends):
    def run(model, feeds):
        net = runtime.load(model, backends=backends)
        try:
            return net.run(feeds), net.assignment
        finally:
            net.close()
    return run
