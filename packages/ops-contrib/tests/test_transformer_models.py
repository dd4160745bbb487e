"""BERT and GPT-2 (2 layers, hidden 64, random weights) as onnxruntime's transformer optimizer
fuses them (EmbedLayerNormalization, Attention, causal for GPT-2, SkipLayerNormalization,
BiasGelu, FastGelu)
and as quantize_dynamic then quantizes them (QEmbedLayerNormalization, QAttention,
MatMulInteger), and GPT-2 with 4-bit blockwise weights (MatMulNBits): they load on nnplug and give onnxruntime's results. models/make_models.py
makes them (it needs torch; these tests do not).

Tolerances. float32: 1e-4 relative + 1e-4 absolute on outputs of size ~1-5 (each is a
LayerNorm's): both runtimes compute in float32 and differ only in summation order and the
order of scalings, a few ulps per op, which two layers' ~20 ops grow to ~1e-5 at most (1e-6 is
seen). int8: one quantization step of the output, its range / 255: the models quantize
activations to uint8 at run time, so a float difference of one ulp just before a
DynamicQuantizeLinear may round one value to the neighbouring step. int4: the float32
tolerance, as the weights dequantize to the same float values in both ((q - zero point) *
scale) and the products are float32 (accuracy_level 0)."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
MODELS = ["bert_optimized", "bert_optimized_int8", "gpt2_optimized", "gpt2_optimized_int8",
          "gpt2_optimized_int4"]
CONTRIB = {"bert_optimized": {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization",
                              "BiasGelu"},
           "bert_optimized_int8": {"QEmbedLayerNormalization", "QAttention",
                                   "SkipLayerNormalization", "BiasGelu"},
           "gpt2_optimized": {"EmbedLayerNormalization", "Attention", "SkipLayerNormalization",
                              "FastGelu"},
           "gpt2_optimized_int8": {"EmbedLayerNormalization", "QAttention",
                                   "SkipLayerNormalization", "FastGelu"},
           "gpt2_optimized_int4": {"EmbedLayerNormalization", "Attention", "MatMulNBits",
                                   "SkipLayerNormalization", "FastGelu"}}


def feeds_for(session, batch, seq, rng):
    mask = np.ones((batch, seq), np.int64)
    mask[-1, seq - 2:] = 0  # a padded sequence: the mask reaches the attention
    out = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            out[i.name] = rng.integers(0, 512, (batch, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            out[i.name] = mask
        else:
            out[i.name] = rng.integers(0, 2, (batch, seq)).astype(np.int64)
    return out


@pytest.mark.parametrize("name", MODELS)
def test_model_is_small_and_has_the_fused_ops(name):
    path = os.path.join(HERE, f"{name}.onnx")
    assert os.path.getsize(path) < 2 * 1024 * 1024
    ops = {n.op_type for n in onnx.load(path).graph.node if n.domain == "com.microsoft"}
    assert ops == CONTRIB[name]


@pytest.mark.parametrize("name", MODELS)
def test_optimized_model_matches_onnxruntime(name, runtime, backends):
    import onnxruntime as ort

    path = os.path.join(HERE, f"{name}.onnx")
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    net = runtime.load(path, backends=backends)
    try:
        assert set(net.assignment.values()) <= {*backends, *(f"{b} (folded)" for b in backends)}
        rng = np.random.default_rng(7)
        for batch, seq in ((2, 8), (1, 5)):
            feeds = feeds_for(session, batch, seq, rng)
            want = session.run(None, feeds)[0]
            got = net.run(feeds)["out"]
            assert got.shape == want.shape == (batch, seq, 64)
            if name.endswith("int8"):  # one step of uint8 activations
                step = float(want.max() - want.min()) / 255
                assert np.abs(got - want).max() <= step, (np.abs(got - want).max(), step)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    finally:
        net.close()
