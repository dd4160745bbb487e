"""nnplug.generation drives decoders exported with their key/value cache in optimum's layout
(the tiny GPT-2 and Llama shipped in nnplug.demo, made by benchmarks/export_decoders.py
--tiny): the tokens equal
those of the same loop on onnxruntime, greedy and sampled with a seed, through every kind of
session; stop tokens, max_new_tokens, seeds and the sampling rules behave as documented; a
model without the layout is refused, naming what it lacks; last_position_logits keeps the
tokens and caches while the logits hold the last position only. nnplug runs the models here on a
Python backend over onnx.reference; the native backends' own tests run them at 1 and 2
threads."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from reference_backend import ReferenceBackend

import nnplug
import nnplug.onnxruntime
from nnplug import InvalidArgumentError, ModelError
from nnplug.generation import Decoder, Sampling, generate, last_position_logits
from nnplug_conformance import decoding, kv_cache

DECODERS = list(decoding.DECODERS)
PROMPT = decoding.PROMPT
NEW = 12
path_of = decoding.model_path


@pytest.fixture(scope="module")
def rt():
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(ReferenceBackend())
    yield r
    r.close()


def onnxruntime_session(name: str):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(path_of(name), so, providers=["CPUExecutionProvider"])


def nnplug_session(rt, name: str, kind: str = "nnplug"):
    if kind == "nnplug.onnxruntime":
        return nnplug.onnxruntime.InferenceSession(path_of(name), providers=["reference"],
                                                   runtime=rt)
    return nnplug.InferenceSession(path_of(name), providers=["reference"], runtime=rt)


@pytest.fixture(scope="module")
def sessions(rt):
    return {name: nnplug_session(rt, name) for name in DECODERS}


@pytest.fixture(scope="module")
def references():
    return {name: onnxruntime_session(name) for name in DECODERS}


@pytest.mark.parametrize("name", DECODERS)
@pytest.mark.parametrize("kind", ["nnplug", "nnplug.onnxruntime", "network"])
def test_greedy_tokens_equal_onnxruntimes(rt, references, name, kind):
    want = generate(references[name], PROMPT, NEW)
    assert want.shape == (NEW,) and want.dtype == np.int64
    if kind == "network":
        with rt.load(path_of(name), backends=["reference"]) as net:
            got = generate(net, PROMPT, NEW)
    else:
        got = generate(nnplug_session(rt, name, kind), PROMPT, NEW)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("name", DECODERS)
def test_io_binding_gives_the_tokens_of_plain_runs(sessions, references, name):
    want = generate(references[name], PROMPT, NEW)
    bound = Decoder(sessions[name], io_binding=True)
    assert bound.io_binding
    assert generate(sessions[name], PROMPT, NEW, io_binding=True).tolist() == want.tolist()
    assert generate(sessions[name], PROMPT, NEW, io_binding=False).tolist() == want.tolist()


@pytest.mark.parametrize("name", DECODERS)
def test_sampled_tokens_with_a_seed_equal_onnxruntimes(sessions, references, name):
    opts = dict(do_sample=True, temperature=0.8, top_k=50, top_p=0.95, seed=1234)
    want = generate(references[name], PROMPT, NEW, **opts)
    assert generate(sessions[name], PROMPT, NEW, **opts).tolist() == want.tolist()
    greedy = generate(references[name], PROMPT, NEW)
    assert want.tolist() != greedy.tolist(), "the sampled tokens should not all be the greedy ones"


def test_the_same_seed_gives_the_same_tokens(references):
    sess = references["llama_kv_tiny"]
    first = generate(sess, PROMPT, 16, do_sample=True, seed=7)
    assert generate(sess, PROMPT, 16, do_sample=True, seed=7).tolist() == first.tolist()
    again = generate(sess, PROMPT, 16, do_sample=True, seed=np.random.default_rng(7))
    assert again.tolist() == first.tolist()
    others = [generate(sess, PROMPT, 16, do_sample=True, seed=s).tolist() for s in (8, 9)]
    assert any(o != first.tolist() for o in others)


def test_generation_stops_at_a_stop_token_and_includes_it(references):
    sess = references["gpt2_kv_tiny"]
    free = generate(sess, PROMPT, NEW).tolist()
    stop = free[4]
    first = free.index(stop)  # the stop token may have come earlier
    got = generate(sess, PROMPT, NEW, eos_token_id=stop).tolist()
    assert got == free[:first + 1]
    other = next(t for t in free if t != stop)
    several = generate(sess, PROMPT, NEW, eos_token_id=[10**6 - 1, stop, other]).tolist()
    assert several == free[:min(first, free.index(other)) + 1]
    never = generate(sess, PROMPT, NEW, eos_token_id=10**6 - 1).tolist()
    assert never == free


def test_max_new_tokens_is_the_length_without_a_stop(references):
    sess = references["llama_kv_tiny"]
    long = generate(sess, PROMPT, 9).tolist()
    for n in (1, 2, 5, 9):
        assert generate(sess, PROMPT, n).tolist() == long[:n]
    assert generate(sess, PROMPT, 0).shape == (0,)


def test_a_batch_gives_each_rows_tokens_and_pads_stopped_rows(references):
    sess = references["gpt2_kv_tiny"]
    rows = [PROMPT, [100, 7, 42, 3, 3, 18]]
    singles = [generate(sess, r, NEW).tolist() for r in rows]
    batch = generate(sess, np.array(rows), NEW)
    assert batch.shape == (2, NEW)
    assert batch.tolist() == singles
    stop = singles[0][2]
    stopped = generate(sess, np.array(rows), NEW, eos_token_id=stop, pad_token_id=0)
    end0 = singles[0].index(stop) + 1
    assert stopped[0].tolist() == singles[0][:end0] + [0] * (stopped.shape[1] - end0)
    if stop in singles[1]:
        assert stopped.shape[1] == max(end0, singles[1].index(stop) + 1)
    else:
        assert stopped[1].tolist() == singles[1] and stopped.shape[1] == NEW


def test_the_prompt_is_checked(references):
    sess = references["gpt2_kv_tiny"]
    with pytest.raises(InvalidArgumentError, match="token id 256 is outside the model's vocabulary"):
        generate(sess, [1, 256], 2)
    with pytest.raises(InvalidArgumentError, match="at least one token"):
        generate(sess, [], 2)
    with pytest.raises(InvalidArgumentError, match="integers"):
        generate(sess, [1.5, 2.0], 2)
    with pytest.raises(InvalidArgumentError, match="max_new_tokens"):
        generate(sess, [1], -1)
    with pytest.raises(InvalidArgumentError, match="do_sample=True"):
        generate(sess, [1], 2, temperature=0.7)
    with pytest.raises(InvalidArgumentError, match="temperature"):
        generate(sess, [1], 2, do_sample=True, temperature=0)
    with pytest.raises(InvalidArgumentError, match="top_p"):
        generate(sess, [1], 2, do_sample=True, top_p=1.5)
    with pytest.raises(InvalidArgumentError, match="io_binding=True needs an nnplug"):
        generate(sess, [1], 2, io_binding=True)


def test_decoder_steps_take_one_token_per_row_after_the_prompt(references):
    dec = Decoder(references["gpt2_kv_tiny"])
    with pytest.raises(InvalidArgumentError, match="before Decoder.start"):
        dec.step([1])
    dec.start(np.array([PROMPT, PROMPT]))
    with pytest.raises(InvalidArgumentError, match="one token per row: 2, not 3"):
        dec.step([1, 2, 3])
    assert dec.step([1, 2]).shape == (2, 256) and dec.past_length == len(PROMPT) + 1


def test_sampling_follows_temperature_top_k_and_top_p():
    logits = np.log(np.array([[1.0, 2.0, 3.0]]))
    np.testing.assert_allclose(Sampling().probabilities(logits), [[1 / 6, 2 / 6, 3 / 6]])
    np.testing.assert_allclose(Sampling(top_k=2).probabilities(logits), [[0, 2 / 5, 3 / 5]])
    np.testing.assert_allclose(Sampling(top_p=0.45).probabilities(logits), [[0, 0, 1]])
    np.testing.assert_allclose(Sampling(top_p=0.6).probabilities(logits), [[0, 2 / 5, 3 / 5]])
    np.testing.assert_allclose(Sampling(temperature=0.5).probabilities(logits),
                               [[1 / 14, 4 / 14, 9 / 14]])
    rng = np.random.default_rng(0)
    draws = np.concatenate([Sampling().draw(np.repeat(logits, 1000, 0), rng) for _ in range(6)])
    np.testing.assert_allclose(np.bincount(draws, minlength=3) / draws.size, [1 / 6, 2 / 6, 3 / 6],
                               atol=0.01)
    assert set(Sampling(top_k=1).draw(np.repeat(logits, 50, 0), rng).tolist()) == {2}


# -- models without the layout ------------------------------------------------------------------
def _decoder_without(drop: set[str]) -> onnx.ModelProto:
    """A one-layer stand-in with the layout's names (its logits are the input ids, broadcast
    over a vocabulary of 8; the presents are the pasts), less the inputs and outputs in
    ``drop``."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    past = ["batch", 2, "past", 4]
    ins = [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
           helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
           helper.make_tensor_value_info("past_key_values.0.key", f, past),
           helper.make_tensor_value_info("past_key_values.0.value", f, past)]
    outs = [helper.make_tensor_value_info("logits", f, ["batch", "seq", 8]),
            helper.make_tensor_value_info("present.0.key", f, past),
            helper.make_tensor_value_info("present.0.value", f, past)]
    nodes = [helper.make_node("Cast", ["input_ids"], ["ids_f"], to=f),
             helper.make_node("Unsqueeze", ["ids_f", "axis"], ["ids_3d"]),
             helper.make_node("Expand", ["ids_3d", "vocab"], ["logits"])]
    for kind in ("key", "value"):
        if f"past_key_values.0.{kind}" not in drop and f"present.0.{kind}" not in drop:
            nodes.append(helper.make_node("Identity", [f"past_key_values.0.{kind}"],
                                          [f"present.0.{kind}"]))
    inits = [onnx.numpy_helper.from_array(np.array([2], np.int64), "axis"),
             onnx.numpy_helper.from_array(np.array([1, 1, 8], np.int64), "vocab")]
    graph = helper.make_graph(nodes, "stand_in", [v for v in ins if v.name not in drop],
                              [v for v in outs if v.name not in drop], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _refusal(model) -> str:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ModelError) as e:
        generate(sess, [1, 2], 3)
    return str(e.value)


def test_the_stand_in_decoder_has_the_layout():
    sess = ort.InferenceSession(_decoder_without(set()).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    assert generate(sess, [1, 2], 3).tolist() == [0, 0, 0]


def test_a_model_without_the_cache_layout_is_refused_naming_what_it_lacks():
    msg = _refusal(kv_cache.model())
    assert "not a decoder with optimum's key/value cache layout" in msg
    assert "no input 'input_ids'" in msg and "no input 'attention_mask'" in msg
    assert "no output 'logits'" in msg and "past_key_values.<i>.key" in msg
    assert "'x', 'past_key', 'past_value'" in msg  # inputs it does not know, by name
    assert "docs/decoding.md" in msg


@pytest.mark.parametrize("drop, named", [
    ({"present.0.value"}, "no output 'present.0.value' for input 'past_key_values.0.value'"),
    ({"past_key_values.0.key", "present.0.key"},
     "no input 'past_key_values.0.key' (the model has layers 0..0)"),
    ({"attention_mask"}, "no input 'attention_mask'"),
])
def test_a_missing_part_of_the_layout_is_named(drop, named):
    assert named in _refusal(_decoder_without(drop))


def test_a_cache_with_symbolic_head_sizes_is_refused_naming_the_input():
    m = _decoder_without(set())
    for vi in m.graph.input:
        if vi.name.startswith("past_key_values"):
            vi.type.tensor_type.shape.dim[3].dim_param = "head_dim"
    msg = _refusal(m)
    assert "input 'past_key_values.0.key' has shape ['batch', 2, 'past', 'head_dim']" in msg


# -- last_position_logits: the final projection reads the last position only ----------------
def ort_of(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", decoding.DECODERS)
def test_last_position_logits_are_the_last_positions_of_the_full_model(rt, name):
    full = onnx.load(decoding.model_path(name))
    last = last_position_logits(full)
    onnx.checker.check_model(last, full_check=True)
    a, b = Decoder(ort_of(full)), Decoder(ort_of(last))
    prompt = np.array(decoding.PROMPT)
    np.testing.assert_allclose(b.start(prompt), a.start(prompt), rtol=1e-5, atol=1e-6)
    tok = [3]
    for _ in range(4):
        np.testing.assert_allclose(b.step(tok), a.step(tok), rtol=1e-5, atol=1e-6)
    for key, value in a._pasts.items():  # the caches do not change
        np.testing.assert_array_equal(b._pasts[key], value)
    sess = nnplug.InferenceSession(last, providers=["reference"], runtime=rt)
    assert [o.shape[1] for o in sess.get_outputs() if o.name == "logits"] == [1]
    want = generate(ort_of(full), decoding.PROMPT, 8)
    np.testing.assert_array_equal(generate(sess, decoding.PROMPT, 8), want)


def test_last_position_logits_refuses_a_model_without_a_final_projection():
    node = helper.make_node("Relu", ["x"], ["logits"], name="not_a_projection")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, "s", 4])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         [1, "s", 4])])
    with pytest.raises(ModelError, match="no MatMul projects the hidden states onto 'logits'"
                                         r".*found Relu"):
        last_position_logits(helper.make_model(g))
    g.output[0].name = "scores"
    g.node[0].output[0] = "scores"
    with pytest.raises(ModelError, match="no output 'logits'"):
        last_position_logits(helper.make_model(g))
