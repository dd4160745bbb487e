"""Exports decoders with their key/value cache in optimum's layout, for benchmarks/decode.py and
the generation tests (random weights, built from config objects: nothing is downloaded).

    python -m venv /work/venv-decoding-export
    /work/venv-decoding-export/bin/pip install torch==2.14.1 transformers onnx onnxruntime
    /work/venv-decoding-export/bin/python benchmarks/export_decoders.py [FOLDER]
    /work/venv-decoding-export/bin/python benchmarks/export_decoders.py --tiny
    /work/venv-decoding-export/bin/python benchmarks/export_decoders.py --dynamo [FOLDER]

Models: GPT-2 (GPT-2's vocabulary of 50257) and a Llama-style decoder (grouped-query
attention: four query heads per key/value head, rotary embeddings, SwiGLU, RMSNorm, vocabulary
32000), each in three sizes: ``gpt2`` / ``llama`` (hidden 256, 2 layers, 4 GPT-2 heads, 8
Llama query heads), ``gpt2_m`` / ``llama_m`` (hidden 512, 4 layers, 8 heads) and ``gpt2_l`` /
``llama_l`` (hidden 768, 6 layers, 12 heads: distilgpt2's shape). FOLDER defaults to
~/.cache/nnplug-bench/decoders. ``--tiny`` writes hidden-64 versions with a 256-token vocabulary
(about half a MB each) into the nnplug package (nnplug/demo/), where ``nnplug generate``'s
examples, the tests of every package and the docs find them (``nnplug.demo.decoder_path``).

The layout (optimum's ``text-generation-with-past``): inputs ``input_ids`` [batch, seq],
``attention_mask`` [batch, past + seq], ``position_ids`` [batch, seq] (Llama only: GPT-2 is
exported as older optimum versions did, counting positions from the cache itself), and
``past_key_values.<i>.key`` / ``.value`` [batch, kv_heads, past, head_dim]; outputs ``logits``
[batch, seq, vocab] and ``present.<i>.key`` / ``.value``. transformers keeps the cache in a
``DynamicCache`` object, which torch.onnx.export cannot take, so a wrapper module takes and
returns plain tensors. Each export is checked against the torch model with onnxruntime at past
lengths 0 (the prompt) and 5, and decoding 8 tokens greedily with the cache must give the
tokens of re-running the whole sequence without it. ``--dynamo`` exports with torch's dynamo
exporter (``dynamo=True``, opset 18; needs onnxscript) into FOLDER/dynamo instead, to compare
the two exports of a model.
"""

from __future__ import annotations

import argparse
import os
import sys

OPSET = 17
DYNAMO_OPSET = 18  # the dynamo exporter's lowest
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench", "decoders")
TINY_DIR = os.path.join(ROOT, "packages", "core", "src", "nnplug", "demo")
FAMILIES = ("gpt2", "llama")
SIZES = {"": (256, 2, 4), "_m": (512, 4, 8), "_l": (768, 6, 12)}
"""model name suffix -> (hidden size, layers, GPT-2 heads); Llama has twice as many query heads
at the smallest size (head size 32) and the same number above it (head size 64)."""
MODELS = tuple(f + size for size in SIZES for f in FAMILIES)


def config_of(name: str, tiny: bool):
    """(transformers config, whether the model takes position_ids) of a model name."""
    import transformers as tf

    family, _, size = name.partition("_")
    hidden, layers, heads = SIZES["_" + size if size else ""]
    vocab_gpt2, vocab_llama = (256, 256) if tiny else (50257, 32000)
    if tiny:
        hidden = 64
    positions = 128 if tiny else 256
    if family == "gpt2":
        config = tf.GPT2Config(vocab_size=vocab_gpt2, n_positions=positions, n_embd=hidden,
                               n_layer=layers, n_head=heads, bos_token_id=0, eos_token_id=1)
    else:
        q_heads = 2 * heads if size == "" else heads
        config = tf.LlamaConfig(vocab_size=vocab_llama, hidden_size=hidden,
                                intermediate_size=-(-hidden * 8 // 3 // 16) * 16,  # Llama's 8/3
                                num_hidden_layers=layers, num_attention_heads=q_heads,
                                num_key_value_heads=q_heads // 4,
                                max_position_embeddings=positions, rope_theta=10000.0,
                                bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    config._attn_implementation = "eager"  # plain ops; sdpa's masks trace into shape checks
    return config, family == "llama"


def build(name: str, tiny: bool):
    import torch
    import transformers as tf

    torch.manual_seed(0)
    config, with_positions = config_of(name, tiny)
    model = (tf.LlamaForCausalLM if with_positions else tf.GPT2LMHeadModel)(config)
    if tiny:  # random init is small; larger weights make the logits of close tokens differ
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(3.0)
    model.eval()
    return model, config, with_positions


def wrapper(model, layers: int, with_positions: bool):
    """A module over plain tensors: (input_ids, attention_mask, [position_ids], past key 0,
    past value 0, ...) -> (logits, present key 0, present value 0, ...)."""
    import torch
    from transformers import DynamicCache

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, *rest):
            seq = input_ids.shape[1]
            if with_positions:
                position_ids, flat = rest[0], rest[1:]
            else:  # as transformers' generate() makes them: count the attended tokens
                position_ids, flat = (attention_mask.cumsum(-1) - 1).clamp(min=0)[:, -seq:], rest
            cache = DynamicCache(ddp_cache_data=[(flat[2 * i], flat[2 * i + 1])
                                                 for i in range(layers)])
            out = self.model(input_ids=input_ids, attention_mask=causal_mask(attention_mask, seq),
                             position_ids=position_ids, cache=cache, use_cache=True)
            cache = getattr(out, "cache", None) or out.past_key_values
            presents = []
            for layer in cache.layers:
                presents += [layer.keys, layer.values]
            return (out.logits, *presents)

    return WithPast().eval()  # export restores this mode: a module in training drops out


def causal_mask(attention_mask, seq):
    """The additive [batch, 1, seq, past + seq] mask of the new tokens over the cache and
    themselves: 0 where a token may attend, the dtype's lowest value elsewhere. transformers
    makes it from sizes it reads as Python ints (constants in a trace); this makes it from the
    tensors' shapes, so the export works at every past length."""
    import torch

    total = attention_mask.shape[1]
    keys = torch.arange(total, device=attention_mask.device)
    queries = keys[-seq:]
    allowed = (keys[None, :] <= queries[:, None])[None, None] & \
        attention_mask[:, None, None, :].bool()
    low = torch.finfo(torch.float32).min
    return torch.zeros(allowed.shape).masked_fill(~allowed, low)


def names(layers: int, with_positions: bool):
    ins = ["input_ids", "attention_mask"] + (["position_ids"] if with_positions else [])
    outs = ["logits"]
    for i in range(layers):
        ins += [f"past_key_values.{i}.key", f"past_key_values.{i}.value"]
        outs += [f"present.{i}.key", f"present.{i}.value"]
    return ins, outs


def example(config, with_positions: bool, batch: int, seq: int, past: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    layers = config.num_hidden_layers
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = config.hidden_size // config.num_attention_heads
    args = [torch.randint(2, config.vocab_size, (batch, seq), generator=g),
            torch.ones(batch, past + seq, dtype=torch.long)]
    if with_positions:
        args.append(torch.arange(past, past + seq).repeat(batch, 1))
    for _ in range(2 * layers):
        args.append(torch.randn(batch, heads, past, dim, generator=g))
    return args


def export(name: str, folder: str, tiny: bool, dynamo: bool = False) -> str:
    import onnx
    import torch

    model, config, with_positions = build(name, tiny)
    layers = config.num_hidden_layers
    module = wrapper(model, layers, with_positions)
    ins, outs = names(layers, with_positions)
    dynamic = {"input_ids": {0: "batch", 1: "sequence"},
               "attention_mask": {0: "batch", 1: "total_sequence"},
               "logits": {0: "batch", 1: "sequence"}}
    if with_positions:
        dynamic["position_ids"] = {0: "batch", 1: "sequence"}
    for n in ins[3 if with_positions else 2:]:
        dynamic[n] = {0: "batch", 2: "past_sequence"}
    for n in outs[1:]:
        dynamic[n] = {0: "batch", 2: "total_sequence"}
    path = os.path.join(folder, f"{name}_kv{'_tiny' if tiny else ''}.onnx")
    shapes = {"dynamic_axes": dynamic}
    if dynamo:  # it cannot map dynamic_axes onto *rest: (ids, mask, [rest])
        auto = torch.export.Dim.DYNAMIC
        each = [{a: auto for a in dynamic[n]} for n in ins]
        shapes = {"dynamic_shapes": (each[0], each[1], tuple(each[2:]))}
    with torch.no_grad():
        torch.onnx.export(module, tuple(example(config, with_positions, 2, 3, 4)), path,
                          opset_version=DYNAMO_OPSET if dynamo else OPSET, input_names=ins,
                          output_names=outs, dynamo=dynamo, external_data=False, **shapes)
    m = onnx.load(path)
    m.producer_name = "nnplug benchmarks/export_decoders.py"
    m.doc_string = (f"{name}: {layers} layers, hidden {config.hidden_size}, vocabulary "
                    f"{config.vocab_size}, random weights (seed 0); key/value cache in "
                    f"optimum's layout")
    onnx.checker.check_model(m, full_check=True)
    onnx.save(m, path)
    check(path, module, model, config, with_positions)
    return path


def check(path, module, model, config, with_positions: bool) -> None:
    """onnxruntime against torch at past 0 and 5; cached greedy decoding against re-running."""
    import numpy as np
    import onnxruntime as ort
    import torch

    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    ins = [i.name for i in sess.get_inputs()]
    for batch, seq, past in ((1, 4, 0), (2, 1, 5), (2, 3, 5)):
        args = example(config, with_positions, batch, seq, past, seed=past + 1)
        with torch.no_grad():
            want = [t.numpy() for t in module(*args)]
        got = sess.run(None, dict(zip(ins, [a.numpy() for a in args])))
        for n, g, w in zip([o.name for o in sess.get_outputs()], got, want):
            if g.shape != w.shape or not np.allclose(g, w, rtol=1e-4, atol=1e-4):
                raise RuntimeError(f"{path}: {n} at (batch, seq, past) = {(batch, seq, past)} "
                                   f"differs from torch (max {np.abs(g - w).max():.3g})")
    # greedy with the cache == greedy re-running the whole sequence in torch
    prompt = [5, 9, 2, 7]
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(8):
            logits = model(input_ids=torch.tensor([ids])).logits
            ids.append(int(logits[0, -1].argmax()))
    sys.path.insert(0, os.path.join(ROOT, "packages", "core", "src"))
    from nnplug.generation import generate

    cached = generate(sess, prompt, 8).tolist()
    if cached != ids[len(prompt):]:
        raise RuntimeError(f"{path}: greedy decoding with the cache gave {cached}, torch "
                           f"without it {ids[len(prompt):]}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", help=f"where to write (default {DEFAULT_DIR}; "
                                              f"with --tiny {os.path.relpath(TINY_DIR, ROOT)})")
    ap.add_argument("--tiny", action="store_true", help="hidden 64, vocabulary 256: test models")
    ap.add_argument("--models", help=f"default: {','.join(MODELS)}; with --tiny "
                                     f"{','.join(FAMILIES)}")
    ap.add_argument("--dynamo", action="store_true",
                    help=f"torch's dynamo exporter at opset {DYNAMO_OPSET}, into FOLDER/dynamo")
    args = ap.parse_args(argv)
    folder = args.folder or (TINY_DIR if args.tiny else DEFAULT_DIR)
    if args.dynamo:
        folder = os.path.join(folder, "dynamo")
    os.makedirs(folder, exist_ok=True)
    models = args.models or ",".join(FAMILIES if args.tiny else MODELS)
    for name in [m for m in models.split(",") if m]:
        if name not in MODELS:
            print(f"unknown model {name!r}; known: {', '.join(MODELS)}", file=sys.stderr)
            return 1
        path = export(name, folder, args.tiny, args.dynamo)
        print(f"{name}: {os.path.getsize(path) / 2**20:.2f} MB -> {path}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
