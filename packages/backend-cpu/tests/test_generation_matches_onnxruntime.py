"""Autoregressive decoding of the exported GPT-2 and Llama-style decoders (their caches in
optimum's layout) on this backend: nnplug.generation gives onnxruntime's tokens, greedy and
sampled with a seed, at 1 and 2 threads, through plain runs and through IO binding (see
nnplug_conformance.decoding)."""

from __future__ import annotations

import pytest

from nnplug_conformance import decoding


@pytest.mark.parametrize("io_binding", [False, True], ids=["run", "io_binding"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", decoding.DECODERS)
def test_generated_tokens_match_onnxruntime(rt, name, threads, io_binding):
    try:
        placement = decoding.assert_tokens_match_onnxruntime(
            decoding.model_path(name), rt, ["cpu"], threads, io_binding)
    finally:
        rt.backends["cpu"].backend.set_num_threads(0)
    assert {p["ran_on"] for p in placement.values()} <= {"cpu", "cpu (folded)"}, placement
