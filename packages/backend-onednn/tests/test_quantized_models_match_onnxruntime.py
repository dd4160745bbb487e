"""Whole quantized models made by onnxruntime's own tools (models/make_quantized_models.py, random
weights) agree with onnxruntime at 1 and 2 threads, with every MatMulInteger and every
QuantizeLinear -> DequantizeLinear pair on this backend:
dynamic-int8 BERT (quantize_dynamic, int8 weights per tensor and uint8 weights with a zero point
per column) and QDQ MobileNetV2 (quantize_static).

Tolerance: 1e-3 of the output's largest magnitude, or, when the output is itself quantized (a
QDQ model's last DequantizeLinear), one quantization step of it, whichever is larger. The integer
products are exact (see test_int8_matmul_matches_onnxruntime.py); the float ops between them
(LayerNormalization, Softmax, Erf, the scale multiplications; a QDQ model's float32
convolutions, which onnxruntime runs as int8 ones) round differently from onnxruntime's by about
1e-7 relative, and a value on a rounding boundary of a DynamicQuantizeLinear or QuantizeLinear
can then take the next integer: one quantization step of that value. Measured: 1.2e-6 of the
range on BERT, 0 on MobileNetV2."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import BACKENDS, onnxruntime_run
from onnx import numpy_helper
from test_int8_matmul_matches_onnxruntime import vnni

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
TOL = 1e-3


def feeds_of(model, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[i.name] = (np.ones(shape) if "mask" in i.name else
                             rng.integers(0, 1000, shape)).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def output_step(model) -> float:
    """The scale of the DequantizeLinear making the graph's output, else 0."""
    last = [n for n in model.graph.node if model.graph.output[0].name in n.output][0]
    if last.op_type != "DequantizeLinear":
        return 0.0
    scale = [i for i in model.graph.initializer if i.name == last.input[1]][0]
    return float(numpy_helper.to_array(scale).max())


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", ["bert_dynamic_int8", "bert_dynamic_int8_u8pc", "mobilenetv2_qdq"])
def test_quantized_model_matches_onnxruntime(rt, name, threads):
    model = onnx.load(os.path.join(MODELS, name + ".onnx"))
    lib = rt.backends["onednn"].backend
    for seed in (0, 1):
        feeds = feeds_of(model, seed)
        want = onnxruntime_run(model, feeds)[0]
        try:
            lib.set_num_threads(threads)
            with rt.load(model, backends=BACKENDS) as net:
                got = net.run(feeds)[net.outputs[0].name]
                placed = {n.name: net.assignment[n.name] for n in model.graph.node
                          if n.op_type == "MatMulInteger"}
                quant = {n.name: net.assignment[n.name] for n in model.graph.node
                         if n.op_type == "QuantizeLinear"}
        finally:
            lib.set_num_threads(0)
        if vnni():
            assert set(placed.values()) <= {"onednn"}, placed
        assert set(quant.values()) <= {"onednn"}, quant  # QDQ pairs (fake_quant)
        assert got.shape == want.shape
        err = float(np.abs(got - want).max())
        bound = max(TOL * float(np.abs(want).max()), output_step(model))
        assert err <= bound, f"{name}: {err:.2e}, more than {bound:.2e}"
