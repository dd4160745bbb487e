"""Whole quantized models made by onnxruntime's own tools (models/make_quantized_models.py, random
weights) agree with onnxruntime at 1 and 2 threads, with every MatMulInteger on this backend:
dynamic-int8 BERT (quantize_dynamic, int8 weights per tensor and uint8 weights with a zero point
per column) and QDQ MobileNetV2 (quantize_static).

Tolerance: 1e-3 of the output's largest magnitude. The integer products are exact (see
test_int8_matmul_matches_onnxruntime.py); the float ops between them (LayerNormalization, Softmax,
Erf, the scale multiplications) round differently from onnxruntime's by about 1e-7 relative, and a
value on a rounding boundary of a DynamicQuantizeLinear or QuantizeLinear can then take the next
integer: one quantization step of one activation, which moves the output by far less than this
(measured: 1.2e-6 on BERT, 0 on MobileNetV2). A wrong zero point or scale moves it by tenths."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from conftest import BACKENDS, onnxruntime_run
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
                placed = {n.op_type: net.assignment[n.name] for n in model.graph.node
                          if n.op_type == "MatMulInteger"}
        finally:
            lib.set_num_threads(0)
        if vnni():
            assert set(placed.values()) <= {"onednn"}, placed
        assert got.shape == want.shape
        err = float(np.abs(got - want).max()) / float(np.abs(want).max())
        assert err <= TOL, f"{name}: {err:.2e} of the output's range"
