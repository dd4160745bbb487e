"""Operator conformance: ONNX's own backend node tests, for every op the backend (or the op
package, for ops overriding standard ONNX ops) takes."""

from __future__ import annotations

import numpy as np
import pytest

from nnplug import ModelError, UnsupportedNodeError

from . import node_tests
from .conftest import tolerance_overrides
from .summary import NOT_CLAIMED


def _backends(subject):
    return [subject.backend.id] if subject.backend else subject.backends_for_ops


def _ran_on(net, backend_id: str) -> bool:
    """Whether some node of ``net`` runs on the backend (not only folded at load)."""
    return any(label == backend_id for label in net.assignment.values())


def test_node(nnplug_subject, node_case, request):
    subject = nnplug_subject
    ops = node_case.op_types
    if subject.backend is None and not set(ops) & set(subject.op_types):
        pytest.skip(f"{NOT_CLAIMED}: no op under test in this case")
    model = node_case.load_model()
    try:
        net = subject.runtime.load(model, backends=_backends(subject))
        if subject.backend is not None and not _ran_on(net, subject.backend.id):
            # the core computed the case at load (Shape of a static input): load it again
            # without folding, so that the backend's own kernel is what is checked
            net.close()
            net = subject.runtime.load(model, backends=_backends(subject),
                                       optimization="disable")
    except UnsupportedNodeError:
        pytest.skip(f"{NOT_CLAIMED} by the backend")
    except ModelError as e:
        pytest.skip(f"the core cannot load this model: {e}")
    try:
        datasets = list(node_case.datasets())
        if not datasets:
            pytest.skip("the case has no data set")
        if any(x is None for ins, outs in datasets for x in (*ins, *outs)):
            pytest.skip("sequence/optional values: covered by nnplug_conformance.node_suite")
        if subject.backend is None:
            taken = [label for label in net.assignment.values() if label.startswith("op:")]
            if not taken:
                pytest.skip(f"{NOT_CLAIMED}: the op declined these nodes")
        rtol, atol = node_tests.tolerance(ops, node_case.rtol, node_case.atol,
                                          tolerance_overrides(request.config))
        inits = {t.name for t in model.graph.initializer}
        graph_inputs = [i.name for i in model.graph.input if i.name not in inits]
        out_names = [o.name for o in model.graph.output]
        problems = []
        for k, (ins, outs) in enumerate(datasets):
            feeds = dict(zip(graph_inputs, ins))
            got = net.run(feeds)
            for name, want in zip(out_names, outs):
                diff = node_tests.compare(name, got[name], np.asarray(want), rtol, atol)
                if diff:
                    problems.append(f"data set {k}: {diff}")
        assert not problems, f"{node_case.name} ({', '.join(ops)}): " + "; ".join(problems)
    finally:
        net.close()
