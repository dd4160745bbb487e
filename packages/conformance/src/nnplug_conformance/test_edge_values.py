"""Edge values and empty tensors (nnplug_conformance.edge_values) through every op the backend
claims: 0, -0.0, +-inf, NaN, rounding ties, Clip's bounds and the activations' thresholds, every
pair of them for binary ops, and a zero-size dimension, against onnxruntime (or the formula
where onnxruntime's answer depends on its kernel). ONNX's node tests feed random values, which
rarely land on these."""

from __future__ import annotations

import pytest

from nnplug import NnplugError, UnsupportedNodeError

from . import edge_values, node_tests
from .conftest import tolerance_overrides
from .summary import NOT_CLAIMED

CASES = edge_values.cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_edge_values(nnplug_subject, nnplug_backend, case, request):
    try:
        net = nnplug_subject.runtime.load(case.model, backends=[nnplug_subject.backend.id])
    except UnsupportedNodeError:
        pytest.skip(f"{NOT_CLAIMED} by the backend")
    rtol, atol = node_tests.tolerance(case.op_types, overrides=tolerance_overrides(request.config))
    out_names = [o.name for o in case.model.graph.output]
    problems = []
    with net:
        for label, feeds in case.datasets.items():
            try:
                want = edge_values.expected(case, feeds)
            except Exception:  # noqa: BLE001 - no reference runs it: an nnplug error is fine too
                want = None
            try:
                got = net.run(feeds)
            except NnplugError as e:
                if want is not None:
                    problems.append(f"{case.name}, {label}: the run failed where the reference "
                                    f"gives an answer: {e}")
                continue
            for name, w in zip(out_names, want or []):
                diff = edge_values.mismatch(case, label, feeds, name, got[name], w, rtol, atol)
                if diff:
                    problems.append(diff)
    assert not problems, f"{case.name} ({', '.join(case.op_types)}): " + "\n".join(problems)
