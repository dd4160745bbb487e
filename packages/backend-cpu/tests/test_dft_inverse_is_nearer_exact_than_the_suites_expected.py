"""ONNX's test_dft_inverse (and _opset19) fail in onnx's own runner (BackendTest, atol 1e-7) on
every nnplug backend, at 10 imaginary parts whose exact value is 0: the case's expected output
holds 1.9e-7 there (numpy's float32 FFT rounding), nnplug about 3e-15. Against the inverse DFT
computed in float64 nnplug is the nearer: within 5e-7 everywhere, where the expected output is
off by 1.5e-6 and onnxruntime by 1.9e-5. So nnplug keeps its answer; docs/conformance.md lists
the case under onnx's own runner."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import onnxruntime_run

from nnplug import onnx_backend


def dft_cases():
    # through nnplug's one collection of onnx's cases: onnx's collect_testcases("DFT") would
    # leave its module-level list holding only DFT cases for every later collector
    return [c for c in onnx_backend.onnx_node_tests({"DFT"})
            if c.name.startswith("test_dft_inverse")]


@pytest.mark.parametrize("case", dft_cases(), ids=lambda c: c.name)
def test_dft_inverse_is_nearer_the_float64_answer_than_the_expected_output(rt, case):
    ins, (want,) = case.data_sets[0]
    feeds = dict(zip([i.name for i in case.model.graph.input], ins))
    x = ins[0].astype(np.float64)
    exact = np.fft.ifft(x[..., 0] + 1j * x[..., 1], axis=1)  # axis 1, inverse: the case's node
    exact = np.stack([exact.real, exact.imag], -1)
    with rt.load(case.model, backends=["cpu"]) as net:
        got = net.run(feeds)[net.outputs[0].name]
    err_nnplug = np.abs(got - exact).max()
    err_expected = np.abs(want - exact).max()
    err_ort = np.abs(onnxruntime_run(case.model, feeds)[0] - exact).max()
    assert err_nnplug < 5e-7, err_nnplug
    assert err_nnplug < err_expected / 3 and err_nnplug < err_ort / 30, \
        (err_nnplug, err_expected, err_ort)
    # where the exact answer is 0, nnplug's is 0 to float64 rounding; the suite's is not
    zero = np.abs(exact) < 1e-12
    assert zero.any() and np.abs(got[zero]).max() < 1e-12
    assert np.abs(want[zero]).max() > 1e-7
