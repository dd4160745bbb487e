"""The bundled demo's files: a trained model whose shipped logits are onnxruntime's, and a
check that tells a float32 rounding difference from a wrong answer."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from nnplug import demo


def test_shipped_logits_are_onnxruntimes_and_the_model_recognises_the_digits():
    model = onnx.load(demo.MODEL)
    onnx.checker.check_model(model, full_check=True)
    assert {o.domain: o.version for o in model.opset_import}[""] == 17
    feeds = demo.demo_input()
    assert feeds[demo.INPUT_NAME].shape == demo.INPUT_SHAPE
    assert feeds[demo.INPUT_NAME].dtype == np.float32
    sess = ort.InferenceSession(demo.MODEL, providers=["CPUExecutionProvider"])
    (logits,) = sess.run([demo.OUTPUT_NAME], feeds)
    np.testing.assert_allclose(logits, demo.expected_output(), rtol=1e-5, atol=1e-5)
    assert demo.check(logits).ok
    # a trained model, not constant weights: most held-out samples are recognised
    labels = demo.true_labels()
    assert (logits.argmax(axis=1) == labels).mean() >= 0.9
    assert len(set(labels.tolist())) >= 8


def test_check_passes_rounding_and_flags_wrong_logits_and_predictions():
    want = demo.expected_output()
    rounding = want * np.float32(1 + 2e-7)
    assert demo.check(rounding).ok
    off = want.copy()
    off[3, 5] += 0.1  # a wrong value that changes no prediction
    c = demo.check(off)
    assert not c.ok and not c.logits_match and c.predictions_match
    flipped = want.copy()
    i = int(want[0].argmin())
    flipped[0, i] = want[0].max() + 1.0
    c = demo.check(flipped)
    assert not c.ok and not c.predictions_match
    nan = want.copy()
    nan[1, 1] = np.nan
    assert not demo.check(nan).ok
