"""Autoregressive decoding on a backend order, against onnxruntime: the tiny decoders shipped
with nnplug (:func:`nnplug.demo.decoder_path`: GPT-2 and a Llama-style decoder with
grouped-query attention, hidden 64, a 256-token vocabulary, random weights, made by
``benchmarks/export_decoders.py --tiny``), run through :func:`nnplug.generation.generate` on an
``nnplug.InferenceSession``, must give the tokens of the same loop on onnxruntime's CPU
provider, greedy and sampled with a seed. Shared by the backends' own tests and used by the
docs (see docs/decoding.md)."""

from __future__ import annotations

import os

import numpy as np

from nnplug.demo import DECODERS, decoder_path
from nnplug.generation import generate

PROMPT = [5, 9, 2, 7, 200, 11]
NEW_TOKENS = 12
SAMPLED = {"do_sample": True, "temperature": 0.8, "top_k": 50, "top_p": 0.95, "seed": 1234}

__all__ = ["DECODERS", "NEW_TOKENS", "PROMPT", "SAMPLED", "assert_tokens_match_onnxruntime",
           "model_path"]

model_path = decoder_path  # the name the backends' tests use


def assert_tokens_match_onnxruntime(path: str, rt, providers: list[str], threads: int,
                                    io_binding: bool | None = None) -> dict[str, dict]:
    """Greedy and sampled tokens of ``path`` on ``providers`` at ``threads`` intra-op threads
    equal onnxruntime's. Returns the session's ``network.placement`` (per node its op and where
    it ran), for the caller to check."""
    import onnxruntime as ort

    import nnplug

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    reference = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    options = nnplug.SessionOptions()
    options.intra_op_num_threads = threads
    sess = nnplug.InferenceSession(path, options, providers=providers, runtime=rt)
    try:
        for kwargs in ({}, SAMPLED):
            want = generate(reference, PROMPT, NEW_TOKENS, **kwargs)
            got = generate(sess, PROMPT, NEW_TOKENS, io_binding=io_binding, **kwargs)
            what = (f"{os.path.basename(path)} on {providers} at {threads} thread(s), "
                    f"{'sampled' if kwargs else 'greedy'}, io_binding={io_binding}")
            assert got.shape == want.shape == (NEW_TOKENS,), what
            np.testing.assert_array_equal(got, want, err_msg=what)
        return sess.network.placement
    finally:
        sess.close()
