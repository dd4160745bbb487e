"""Autoregressive decoding of the exported GPT-2 and Llama-style decoders (their caches in
optimum's layout) on ["opencl", a CPU backend]: nnplug.generation gives onnxruntime's tokens,
greedy and sampled with a seed, with the caches fed back through IO binding (left on the
device between steps) and through plain runs (see nnplug_conformance.decoding). The CPU backend is
nnplug-backend-cpu where it is installed, else the reference backend stands in for it."""

from __future__ import annotations

import pytest
from conftest import ReferenceCPUBackend, new_runtime

from nnplug_backend_opencl import OpenCLBackend
from nnplug_conformance import decoding


def _cpu():
    try:
        import nnplug_backend_cpu
    except ImportError:
        return ReferenceCPUBackend()
    return nnplug_backend_cpu.library_path()


@pytest.fixture(scope="module")
def mixed():
    rt = new_runtime(OpenCLBackend, _cpu())
    yield rt
    rt.close()


@pytest.mark.parametrize("io_binding", [None, False], ids=["io_binding", "run"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", decoding.DECODERS)
def test_opencl_generated_tokens_match_onnxruntime(mixed, name, threads, io_binding):
    cpu = next(b for b in mixed.backends if b != "opencl")
    try:
        placement = decoding.assert_tokens_match_onnxruntime(
            decoding.model_path(name), mixed, ["opencl", cpu], threads, io_binding)
    finally:
        for info in mixed.backends.values():
            try:
                info.backend.set_num_threads(0)
            except NotImplementedError:
                pass
    # the attention and the projections run on the device (shape arithmetic may not)
    heavy = {n: p["ran_on"] for n, p in placement.items() if p["op"] in ("MatMul", "Softmax")}
    assert heavy and set(heavy.values()) == {"opencl"}, heavy


def test_opencl_sessions_decode_through_io_binding_by_default(mixed):
    """The caches stay on the device between steps unless the caller says otherwise."""
    import nnplug
    import nnplug.onnxruntime
    from nnplug.generation import Decoder

    path = decoding.model_path()
    cpu = next(b for b in mixed.backends if b != "opencl")
    with nnplug.InferenceSession(path, providers=["opencl", cpu], runtime=mixed) as sess:
        assert Decoder(sess).io_binding
        assert not Decoder(sess, io_binding=False).io_binding
    with nnplug.onnxruntime.InferenceSession(path, providers=["opencl", cpu],
                                             runtime=mixed) as sess:
        assert Decoder(sess).io_binding
    with nnplug.InferenceSession(path, providers=[cpu], runtime=mixed) as sess:
        assert not Decoder(sess).io_binding  # on the host it saves nothing


@pytest.mark.parametrize("io_binding, copies_per_step", [(True, 0), (False, 4)])
def test_opencl_io_binding_feeds_the_presents_back_without_copies(mixed, io_binding,
                                                                  copies_per_step):
    """The session's profile records every copy at a partition's edge: through IO binding the
    four caches of the tiny GPT-2 (2 layers, key and value) go to the device once, as the first
    step's empty pasts, and then stay there; through plain runs they come back from the host
    every step."""
    import nnplug
    from nnplug.generation import Decoder

    cpu = next(b for b in mixed.backends if b != "opencl")
    so = nnplug.SessionOptions()
    so.enable_profiling = True
    steps = 3
    with nnplug.InferenceSession(decoding.model_path(), so, providers=["opencl", cpu],
                                 runtime=mixed) as sess:
        dec = Decoder(sess, io_binding=io_binding)
        logits = dec.start(decoding.PROMPT)
        for _ in range(steps):
            logits = dec.step([int(logits[0].argmax())])
        copies = [e["args"] for e in sess._profiler.events() if e["cat"] == "copy"]
    pasts = [c for c in copies if c["value"].startswith("past_key_values.")]
    assert all(c["to"].startswith("opencl") for c in pasts), pasts
    assert len(pasts) == 4 + steps * copies_per_step, pasts
