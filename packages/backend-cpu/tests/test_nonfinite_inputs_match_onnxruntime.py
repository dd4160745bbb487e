"""NaN, infinities, -0.0, denormals and values near float32's limits through the ops and fused
chains of nnplug.testing.nonfinite, at 1 and 2 threads: the answer is onnxruntime's (or, for
max pooling and LRN, the op's formula). Among them: LayerNormalization of a row whose squared
deviations pass float32's range (stash_type 1: InvStdDev 0, as onnxruntime has it)."""

from __future__ import annotations

import pytest
from conftest import onnxruntime_run, run_cpu

from nnplug.testing.nonfinite import assert_nonfinite_match, cases

CASES = cases()


@pytest.mark.parametrize("case", sorted(CASES))
def test_nonfinite_inputs_match_onnxruntime(rt, threads, case):
    model, feeds, formula = CASES[case]
    (got,), assignment = run_cpu(rt, model, feeds)
    assert set(assignment.values()) == {"cpu"}, assignment
    want = formula(feeds, onnxruntime_run) if formula else onnxruntime_run(model, feeds)[0]
    assert_nonfinite_match(got, want, case)
