"""NaN, infinities, -0.0, denormals and values near float32's limits through the ops and fused
chains of nnplug_conformance.nonfinite, at 1 and 2 threads: the answer is onnxruntime's (or,
where onnxruntime's depends on its kernel, the op's formula). Among them what these cases
found here: Celu and HardSigmoid's double path keeping NaN, Pow to 0.5 at -inf and -0,
Hardmax's first NaN, ReduceL2 and LayerNormalization of rows whose squares pass float32's
range, ReduceLogSumExp of a row holding +inf."""

from __future__ import annotations

import pytest
from conftest import onnxruntime_run, run_cpu

from nnplug_conformance.nonfinite import assert_nonfinite_match, cases

CASES = cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_nonfinite_inputs_match_onnxruntime(rt, threads, case):
    model, feeds, formula = CASES[case]
    (got,), assignment = run_cpu(rt, model, feeds)
    assert {v.split()[0] for v in assignment.values()} == {"cpu"}, assignment  # "cpu (folded)" too
    want = formula(feeds, onnxruntime_run) if formula else onnxruntime_run(model, feeds)[0]
    assert_nonfinite_match(got, want, case)
