"""``nnplug generate`` run as a real subprocess: on the tiny GPT-2 of nnplug.demo it
prints the token ids that the same loop on onnxruntime makes, greedy, sampled with a seed and
with a stop token; bad arguments and a model without the cache layout end with one clear line.
The decoders run on the onnx.reference backend, installed as a plugin package."""

from __future__ import annotations

import onnx
import onnxruntime as ort
import pytest
from models import mlp
from test_cli import make_env, nnplug_cmd

from nnplug.demo import decoder_path
from nnplug.generation import generate

MODEL = decoder_path("gpt2_kv_tiny")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return make_env(tmp_path_factory.mktemp("gen"), ["reference = reference_backend:ReferenceBackend"])


@pytest.fixture(scope="module")
def reference():
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(MODEL, so, providers=["CPUExecutionProvider"])


def printed(r) -> list[int]:
    assert r.returncode == 0, r.stderr
    return [int(t) for t in r.stdout.strip().split(",")]


def test_generate_prints_the_greedy_tokens_of_onnxruntime(env, reference):
    r = nnplug_cmd(["generate", MODEL, "--prompt", "5,9,2,7", "--max-new-tokens", "10",
                    "--backend", "reference"], env)
    assert printed(r) == generate(reference, [5, 9, 2, 7], 10).tolist()


def test_generate_samples_with_a_seed_and_stops_at_a_stop_token(env, reference):
    r = nnplug_cmd(["generate", MODEL, "--prompt", "5, 9, 2", "--max-new-tokens", "10", "--sample",
                    "--temperature", "0.9", "--top-k", "40", "--top-p", "0.9", "--seed", "11",
                    "--backend", "reference"], env)
    want = generate(reference, [5, 9, 2], 10, do_sample=True, temperature=0.9, top_k=40,
                    top_p=0.9, seed=11).tolist()
    assert printed(r) == want
    free = generate(reference, [5, 9, 2], 10).tolist()
    r = nnplug_cmd(["generate", MODEL, "--prompt", "5,9,2", "--max-new-tokens", "10",
                    "--eos", f"100000,{free[3]}", "--backend", "reference"], env)
    assert printed(r) == free[:free.index(free[3]) + 1]


@pytest.mark.parametrize("args, status, message", [
    (["--prompt", "1,x"], 2, "'1,x': give comma-separated token ids, e.g. 1,2,3"),
    (["--prompt", "1", "--top-k", "5"], 1, "--top-k choose how tokens are sampled: add --sample"),
    (["--prompt", "1,300"], 1, "token id 300 is outside the model's vocabulary (0..255)"),
    (["--prompt", "1", "--model-is", "MLP"], 1, "no inputs 'past_key_values.<i>.key'"),
])
def test_generate_errors_end_with_one_line(env, tmp_path, args, status, message):
    model = MODEL
    if "--model-is" in args:
        model = str(tmp_path / "mlp.onnx")
        onnx.save(mlp(), model)
        args = args[:2]
    r = nnplug_cmd(["generate", model, *args, "--backend", "reference"], env)
    assert r.returncode == status
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    if status == 1:
        assert len(r.stderr.strip().splitlines()) == 1
