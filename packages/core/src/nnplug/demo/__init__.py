"""The bundled demo: a small CNN that recognises handwritten digits (8x8 images).

It was trained on scikit-learn's digits data set (``packages/core/tools/make_demo_model.py``,
seeded); the samples shipped here are held-out images it never saw in training, with their
true labels and the logits onnxruntime computes for them.

- :data:`MODEL`: the model's path (input ``image`` float32 [N, 1, 8, 8], pixels in [0, 1];
  output ``logits`` float32 [N, 10], one per digit);
- :func:`demo_input`: the feeds for all samples, ``{"image": array of shape (32, 1, 8, 8)}``;
- :func:`true_labels` and :func:`expected_output`: what each sample is, and onnxruntime's
  logits for it;
- :func:`check`: a result compared with those logits at float32 precision.

Also two tiny text decoders for ``nnplug generate`` and :func:`nnplug.generation.generate`
(:func:`decoder_path`): GPT-2 and a Llama-style decoder with grouped-query attention, exported
with their key/value cache in optimum's layout (hidden 64, a 256-token vocabulary, random
weights, made by ``benchmarks/export_decoders.py --tiny``; see docs/decoding.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

HERE = os.path.dirname(__file__)
MODEL = os.path.join(HERE, "digits_cnn.onnx")
SAMPLES = os.path.join(HERE, "digits_samples.npz")
INPUT_NAME = "image"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (32, 1, 8, 8)
# A float32 result may differ from onnxruntime's by rounding (summation order, FMA, SIMD
# width): allow 1e-4 of the logits' range. A wrong kernel is off by far more.
RTOL_OF_RANGE = 1e-4
DECODERS = ("gpt2_kv_tiny", "llama_kv_tiny")


def decoder_path(name: str = "gpt2_kv_tiny") -> str:
    """The path of a tiny decoder shipped with nnplug: one of :data:`DECODERS`."""
    if name not in DECODERS:
        raise ValueError(f"no tiny decoder {name!r}; there are: {', '.join(DECODERS)}")
    return os.path.join(HERE, f"{name}.onnx")


def _samples() -> dict[str, np.ndarray]:
    with np.load(SAMPLES, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def demo_input() -> dict[str, np.ndarray]:
    """The feeds: every shipped sample image, as one batch."""
    return {INPUT_NAME: _samples()["images"]}


def true_labels() -> np.ndarray:
    """The digit (0-9) each sample image shows, int64 of shape (32,)."""
    return _samples()["labels"]


def expected_output() -> np.ndarray:
    """onnxruntime's logits for :func:`demo_input`, float32 of shape (32, 10)."""
    return _samples()["expected_logits"]


@dataclass(frozen=True)
class Check:
    """A result compared with onnxruntime's: ``ok`` when both hold."""

    predicted: np.ndarray   # the digit each sample was recognised as
    expected_predicted: np.ndarray  # onnxruntime's
    max_abs_diff: float
    tolerance: float

    @property
    def logits_match(self) -> bool:
        return self.max_abs_diff <= self.tolerance

    @property
    def predictions_match(self) -> bool:
        return bool(np.array_equal(self.predicted, self.expected_predicted))

    @property
    def ok(self) -> bool:
        return self.logits_match and self.predictions_match


def check(logits) -> Check:
    """Compare ``logits`` (the model's output on :func:`demo_input`) with onnxruntime's."""
    expected = expected_output()
    logits = np.asarray(logits)
    if logits.shape != expected.shape:
        raise ValueError(f"demo output has shape {logits.shape}, expected {expected.shape}")
    diff = np.abs(logits.astype(np.float64) - expected.astype(np.float64))
    tol = RTOL_OF_RANGE * float(expected.max() - expected.min())
    # a NaN or inf anywhere is a mismatch, whatever the other values are
    max_diff = float(diff.max()) if np.isfinite(diff).all() else float("inf")
    return Check(logits.argmax(axis=1), expected.argmax(axis=1), max_diff, tol)
