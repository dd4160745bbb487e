"""NaN, infinities, -0.0, denormals and values near float32's limits through the ops and fused
chains of nnplug_conformance.nonfinite on the OpenCL backend alone: the answer is onnxruntime's
(or, where onnxruntime's depends on its kernel, the op's formula). Relu, Clip, HardSigmoid,
HardSwish, Celu and the fused activations clamp by compares, and max pooling gives NaN for a
window holding one: OpenCL's fmax and fmin return the operand that is not NaN. Linear Resize
weighs the two taps of the last index (the same element) half each, as onnxruntime does."""

from __future__ import annotations

import pytest

import nnplug
from nnplug_conformance.nonfinite import assert_nonfinite_match, cases

CASES = cases()
# the cases whose op this backend does not run (LogSoftmax: its opset-18 expansion holds a
# Constant); a case that changes side fails below
DECLINED = {
    "ArgMax", "ArgMax-last", "ArgMin", "ArgMin-last", "Asinh", "Atan", "GlobalMaxPool", "Hardmax", "LpNormalization",
    "LpPool", "Mean-2", "ReduceLogSumExp", "ReduceProd", "Shrink", "Sinh",
}


def onnxruntime_run(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("case", sorted(CASES))
def test_opencl_nonfinite_inputs_match_onnxruntime(rt, case):
    model, feeds, formula = CASES[case]
    try:
        net = rt.load(model, backends=["opencl"])
    except nnplug.UnsupportedNodeError as e:
        assert case in DECLINED, f"{case}: declined: {e}"
        return
    assert case not in DECLINED, f"{case} now runs: take it out of DECLINED"
    with net:
        got = net.run(feeds)["y"]
    want = formula(feeds, onnxruntime_run) if formula else onnxruntime_run(model, feeds)[0]
    assert_nonfinite_match(got, want, case)
