"""The precision hint (Target attribute ``precision``, session config entry
``nnplug.precision``, NNPLUG_PRECISION): ``bf16`` lets oneDNN compute convolutions, matmuls
and inner products in bfloat16 (its fpmath mode; inputs and outputs stay float32), ``f32``
(the default) stays exact, any other value is refused naming the values, and the cpu backend,
which has no such setting, runs the model as written.

Tolerance for bf16: a bfloat16 operand carries 8 significant bits, so each product is off by
up to about 2^-8 of its size; sums accumulate in float32, and over a few layers of random
weights the errors stay well under 2e-2 of the output's largest magnitude (OpenVINO's bf16
default is 1e-3 to 2e-2 off on real models): the bound checked against onnxruntime's float32.
Whether oneDNN takes the permission depends on the CPU: oneDNN 3.2 uses bfloat16 kernels for
float32 data on CPUs with AMX, and keeps its float32 kernels (exact answers) on others, so the
hint reaching the primitives is checked in oneDNN's own log (ONEDNN_VERBOSE)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import BACKENDS, onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

import nnplug


def conv_gemm_model():
    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((16, 3, 3, 3)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype(np.float32)
    fc = (rng.standard_normal((32, 10)) * 0.2).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["p"]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    graph = helper.make_graph(
        nodes, "convnet", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        [numpy_helper.from_array(a, n) for n, a in [("w1", w1), ("w2", w2), ("fc", fc)]])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


FEEDS = {"x": np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)}


def run_with(rt, precision):
    targets = None if precision is None else {"onednn": {"kind": "onednn",
                                                          "precision": precision}}
    with rt.load(conv_gemm_model(), backends=BACKENDS, targets=targets) as net:
        return net.run(FEEDS)["y"]


def test_bf16_stays_within_its_bound_of_onnxruntime_float32(rt):
    want = onnxruntime_run(conv_gemm_model(), FEEDS)[0]
    got = run_with(rt, "bf16")
    assert np.abs(got - want).max() <= 2e-2 * np.abs(want).max()


def test_f32_is_the_default_and_exact(rt):
    default = run_with(rt, None)
    assert np.array_equal(run_with(rt, "f32"), default)
    np.testing.assert_allclose(default, onnxruntime_run(conv_gemm_model(), FEEDS)[0],
                               rtol=1e-5, atol=1e-6)


def test_an_unknown_precision_is_refused_naming_the_values(rt):
    with pytest.raises(nnplug.NnplugError, match="precision.*f32.*bf16"):
        run_with(rt, "f16")
    so = nnplug.SessionOptions()
    so.add_session_config_entry("nnplug.precision", "fp8")
    with pytest.raises(nnplug.NnplugError, match="nnplug.precision='fp8'.*f32, bf16"):
        nnplug.InferenceSession(conv_gemm_model(), so, providers=BACKENDS, runtime=rt)


SCRIPT = """
import json, sys
import numpy as np
import nnplug
sys.path.insert(0, sys.argv[1])
from conftest import make_runtime
from test_precision_hint_sets_bf16_products import FEEDS, conv_gemm_model
rt = make_runtime()
for precision in ["f32", "bf16"]:
    so = nnplug.SessionOptions()
    so.add_session_config_entry("nnplug.precision", precision)
    s = nnplug.InferenceSession(conv_gemm_model(), so, providers=["onednn", "cpu"], runtime=rt)
    print("== " + precision, flush=True)
    s.run(None, FEEDS)
    sys.stdout.flush()
"""


def test_the_session_hint_reaches_onednns_products_only():
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    env.pop("NNPLUG_PRECISION", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, here], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    runs = {}
    for part in out.split("== ")[1:]:
        name, _, log = part.partition("\n")
        runs[name] = [line for line in log.splitlines() if line.startswith("onednn_verbose,exec")]
    products = ("convolution", "matmul", "inner_product")
    for precision, lines in runs.items():
        assert any(p in line for line in lines for p in products), json.dumps(runs)
        for line in lines:
            # under bf16 a product either reads bf16 operands already (AMX) or has oneDNN's
            # permission to compute in bf16 (its fpmath mode), not both: some kernels refuse
            # the mode (the brgemm depthwise convolution); under f32, neither
            marked, bf16_operands = "attr-fpmath:bf16" in line, "src_bf16" in line
            product = precision == "bf16" and any(p in line for p in products)
            assert marked == (product and not bf16_operands), line


def test_on_amx_products_take_bf16_operands_with_weights_packed_once():
    """Where oneDNN runs AMX kernels (its log's isa line says so), a bf16 convolution or
    inner product reads bf16 operands: its weights packed in bf16 when the session is made,
    its input converted by a reorder, its output float32 unless only convolutions read it. Given float32 weights with the
    fpmath mode alone, oneDNN converted them again on every run (a ResNet-50: 23 ms a run
    with, 7 without). Elsewhere the operands stay float32 (oneDNN would not use bf16 there)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "ONEDNN_VERBOSE": "1"}
    env.pop("NNPLUG_PRECISION", None)
    out = subprocess.run([sys.executable, "-c", SCRIPT, here], env=env, capture_output=True,
                         text=True, timeout=300, check=True).stdout
    isa = next(line for line in out.splitlines() if line.startswith("onednn_verbose,info,cpu,isa"))
    amx = "AMX" in isa
    parts = {}
    for part in out.split("== ")[1:]:
        name, _, log = part.partition("\n")
        parts[name] = [line for line in log.splitlines() if line.startswith("onednn_verbose,exec")]
    products = [line for line in parts["bf16"] if ",convolution," in line or ",inner_product," in line]
    assert len(products) == 3, parts["bf16"]
    for i, line in enumerate(products):
        # the first convolution's result is read by the second only: written in bf16 too
        operands = ("src_bf16" in line, "wei_bf16" in line, "dst_bf16" in line)
        assert operands == ((True, True, i == 0) if amx else (False, False, False)), (isa, line)
    for line in parts["bf16"]:  # the weights were packed when the session was made
        if ",reorder," in line:
            assert line.split(",")[-2].startswith("1x"), line  # batch-1 activations only
    f32 = [line for line in parts["f32"] if ",convolution," in line or ",inner_product," in line]
    assert f32 and not any("bf16" in line for line in f32), parts["f32"]
