"""Makes the small transformer models the tests load: BERT and GPT-2 with random weights
(from a config, nothing downloaded), exported to ONNX, fused by onnxruntime's transformer
optimizer (com.microsoft ops), quantized by onnxruntime's quantize_dynamic, and GPT-2's weights
also to 4 bits by onnxruntime's MatMulNBitsQuantizer.

Needs torch and transformers, which the tests do not: run it in a venv of its own,

    python -m venv /tmp/export && /tmp/export/bin/pip install torch==2.13.0 transformers \
        onnx onnxruntime onnxscript
    /tmp/export/bin/python packages/ops-contrib/tests/models/make_models.py

and commit the .onnx files it writes beside itself (each well under 2 MB).
"""

from __future__ import annotations

import collections
import os
import sys

import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OPSET = 17
SEQ = 8


def randomized(model):
    """Fresh models have LayerNorm weights of one and biases of zero, which would hide a
    wrong gamma, beta or bias: give every one of them random values too."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.1)
            elif "LayerNorm" in name or ".ln_" in name:
                p.normal_(1.0, 0.1)
    return model


def export(model, args, names, dynamic, path):
    model.eval()
    kwargs = dict(input_names=names, output_names=["out"], opset_version=OPSET,
                  dynamic_axes=dynamic, do_constant_folding=True)
    try:  # the TorchScript exporter: the graphs onnxruntime's fusions are written for
        torch.onnx.export(model, args, path, dynamo=False, **kwargs)
    except TypeError:
        torch.onnx.export(model, args, path, **kwargs)


class LastHidden(torch.nn.Module):
    def __init__(self, inner, names):
        super().__init__()
        self.inner, self.names = inner, names

    def forward(self, *args):
        return self.inner(**dict(zip(self.names, args)), return_dict=False)[0]


def bert(path):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, type_vocab_size=2,
                     attn_implementation="eager")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    m = LastHidden(randomized(BertModel(cfg, add_pooling_layer=False)), names)
    ids = torch.randint(0, 512, (2, SEQ))
    mask = torch.ones(2, SEQ, dtype=torch.int64)
    seg = torch.zeros(2, SEQ, dtype=torch.int64)
    dyn = {n: {0: "batch", 1: "seq"} for n in ("input_ids", "attention_mask", "token_type_ids")}
    dyn["out"] = {0: "batch", 1: "seq"}
    export(m, (ids, mask, seg), names, dyn, path)
    return cfg


def classic_gpt2_attention(self, hidden_states, *args, **kwargs):
    """GPT-2's attention as transformers 2-4 wrote it: the graph onnxruntime's gpt2 fusion
    reads (Split, the key permuted once, Div by sqrt(head), Where over a slice of the
    causal buffer). transformers 5 builds the causal mask elsewhere (masking_utils), a graph
    that fusion does not recognize; the function is the same (checked in gpt2())."""
    q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)

    def heads(x, key=False):
        x = x.view(x.size()[:-1] + (self.num_heads, self.head_dim))
        return x.permute(0, 2, 3, 1) if key else x.permute(0, 2, 1, 3)

    q, k, v = heads(q), heads(k, True), heads(v)
    w = torch.matmul(q, k) / (float(v.size(-1)) ** 0.5)
    nd, ns = w.size(-2), w.size(-1)
    w = torch.where(self.causal[:, :, ns - nd:ns, :ns], w, torch.tensor(-1e4))
    a = torch.matmul(torch.nn.functional.softmax(w, dim=-1), v).permute(0, 2, 1, 3).contiguous()
    return self.c_proj(a.view(a.size()[:-2] + (a.size(-2) * a.size(-1),))), None


def gpt2(path):
    from transformers import GPT2Config, GPT2Model
    from transformers.models.gpt2 import modeling_gpt2

    torch.manual_seed(1)
    cfg = GPT2Config(vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                     attn_implementation="eager", use_cache=False)
    model = randomized(GPT2Model(cfg)).eval()
    for block in model.h:
        block.attn.register_buffer("causal", torch.tril(torch.ones(64, 64, dtype=torch.bool))
                                   .view(1, 1, 64, 64), persistent=False)
    m = LastHidden(model, ["input_ids"])
    ids = torch.randint(0, 512, (2, SEQ))
    with torch.no_grad():
        want = m(ids)
        modeling_gpt2.GPT2Attention.forward = classic_gpt2_attention
        got = m(ids)
    assert torch.allclose(got, want, atol=1e-5), "the classic attention is not GPT-2's"
    # one input: onnxruntime's gpt2 fusion without past takes models of one input
    export(m, (ids,), ["input_ids"], {"input_ids": {0: "batch", 1: "seq"},
                                      "out": {0: "batch", 1: "seq"}}, path)
    return cfg


def optimize(src, dst, model_type, cfg):
    from onnxruntime.transformers.optimizer import optimize_model

    heads = getattr(cfg, "num_attention_heads", None) or cfg.n_head
    hidden = getattr(cfg, "hidden_size", None) or cfg.n_embd
    opt = optimize_model(src, model_type=model_type, num_heads=heads, hidden_size=hidden,
                         opt_level=0)
    opt.save_model_to_file(dst)


def quantize(src, dst):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    # the fused ops are of com.microsoft, which ONNX's shape inference cannot type
    quantize_dynamic(src, dst, weight_type=QuantType.QInt8,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})


def quantize_4bit(src, dst):
    """Blockwise 4-bit weights (MatMulNBits), as onnxruntime quantizes LLMs."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    q = MatMulNBitsQuantizer(onnx.load(src), block_size=32, is_symmetric=False, bits=4)
    q.process()
    onnx.save(q.model.model, dst)


def ops_of(path):
    m = onnx.load(path)
    return collections.Counter(f"{n.domain or 'ai.onnx'}:{n.op_type}" for n in m.graph.node
                               if n.domain not in ("", "ai.onnx"))


def main():
    os.makedirs(HERE, exist_ok=True)
    for name, make, kind in (("bert", bert, "bert"), ("gpt2", gpt2, "gpt2")):
        raw = os.path.join(HERE, f"{name}_raw.onnx")
        cfg = make(raw)
        fused = os.path.join(HERE, f"{name}_optimized.onnx")
        optimize(raw, fused, kind, cfg)
        quant = os.path.join(HERE, f"{name}_optimized_int8.onnx")
        quantize(fused, quant)
        made = [fused, quant]
        if name == "gpt2":
            made.append(os.path.join(HERE, f"{name}_optimized_int4.onnx"))
            quantize_4bit(fused, made[-1])
        os.remove(raw)
        for p in made:
            print(os.path.basename(p), os.path.getsize(p), "bytes", dict(ops_of(p)),
                  file=sys.stderr)


if __name__ == "__main__":
    main()
