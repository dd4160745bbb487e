"""QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear to and from uint8 / int8 with
float32 scales, per tensor and per axis, run as branch-free loops (op_quant.c quant8, dequant8:
QDQ models spent most of their time in the per-element generic path). Their results equal
onnxruntime's bit for bit: ties rounded to even, saturation at both ends, zero points at the
ends of their range, NaN and infinities, -0, values far past the range, odd lengths (the
vector loops' tails) and axis runs of one element, on the portable loops and the AVX-512 ones."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from conftest import one_node_model

RANGE = {np.uint8: (0, 255), np.int8: (-128, 127)}


def onnxruntime(model, feeds):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def awkward(rng, n, scale):
    """n floats: random ones, exact ties (k + 0.5 steps), far past the range, and specials."""
    x = rng.uniform(-300, 300, n).astype(np.float32) * np.float32(scale)
    ties = (rng.integers(-200, 200, n).astype(np.float32) + np.float32(0.5)) * np.float32(scale)
    x = np.where(rng.random(n) < 0.3, ties, x)
    special = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 2.5 * scale,
                        -2.5 * scale, 127.5 * scale, -128.5 * scale, 255.5 * scale], np.float32)
    x[:len(special)] = special[:n]
    return x


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("n", [1, 7, 33, 1000, 20001])
def test_per_tensor_quantize_and_dequantize_match_exactly(rt, dt, n):
    rng = np.random.default_rng(n)
    for zp in (*RANGE[dt], 0, 3):
        for scale in (np.float32(0.25), np.float32(0.0137)):
            x = awkward(rng, n, scale)
            model, feeds = one_node_model("QuantizeLinear", [x, scale, dt(zp)], opset=19,
                                          const_inputs=(1, 2))
            with rt.load(model) as net:
                q = net.run(feeds)["out0"]
            want = onnxruntime(model, feeds)[0]
            np.testing.assert_array_equal(q, want, err_msg=f"zp={zp} scale={scale}")
            model, feeds = one_node_model("DequantizeLinear", [want, scale, dt(zp)], opset=19,
                                          const_inputs=(1, 2))
            with rt.load(model) as net:
                got = net.run(feeds)["out0"]
            np.testing.assert_array_equal(got.view(np.uint32),
                                          onnxruntime(model, feeds)[0].view(np.uint32))


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("shape,axis", [((3, 5, 7), 1), ((4, 9), 1), ((6, 2, 3, 3), 0),
                                        ((5, 17), 0)], ids=["middle", "last", "weights", "rows"])
def test_per_axis_quantize_and_dequantize_match_exactly(rt, dt, shape, axis):
    rng = np.random.default_rng(len(shape) * 10 + axis)
    c = shape[axis]
    scale = rng.uniform(0.01, 0.5, c).astype(np.float32)
    lo, hi = RANGE[dt]
    zp = np.array([[lo, hi, 0, 1][i % 4] for i in range(c)], dt)
    x = awkward(rng, int(np.prod(shape)), 0.1).reshape(shape)
    model, feeds = one_node_model("QuantizeLinear", [x, scale, zp], dict(axis=axis), opset=19,
                                  const_inputs=(1, 2))
    with rt.load(model) as net:
        q = net.run(feeds)["out0"]
    want = onnxruntime(model, feeds)[0]
    np.testing.assert_array_equal(q, want)
    model, feeds = one_node_model("DequantizeLinear", [want, scale, zp], dict(axis=axis),
                                  opset=19, const_inputs=(1, 2))
    with rt.load(model) as net:
        got = net.run(feeds)["out0"]
    np.testing.assert_array_equal(got.view(np.uint32), onnxruntime(model, feeds)[0].view(np.uint32))


@pytest.mark.parametrize("n", [1, 31, 4096, 16384 * 2 + 21])
def test_dynamic_quantize_linear_matches_exactly(rt, n):
    """Its range is taken by chunks of 16384 on several threads, 16 lanes at a time: the
    extremes sit in a chunk's vector part and in the last chunk's scalar tail."""
    rng = np.random.default_rng(n)
    for lo, hi in ((-3, 5), (0.5, 9), (-7, -1), (-1e-3, 1e-3)):
        x = rng.uniform(lo, hi, n).astype(np.float32)
        if n > 1:
            x[-1], x[n // 3] = np.float32(lo * 1.5 - 0.1), np.float32(hi * 1.5 + 0.1)
        model, feeds = one_node_model("DynamicQuantizeLinear", [x], outputs=3, opset=11)
        with rt.load(model) as net:
            got = net.run(feeds)
        want = onnxruntime(model, feeds)
        for k, w in enumerate(want):
            np.testing.assert_array_equal(got[f"out{k}"], w)


PORTABLE = r"""
import sys, numpy as np, onnx, nnplug, nnplug_backend_cpu
rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
rt.register_backend(nnplug_backend_cpu.library_path())
print(rt.backends["cpu"].backend.device_api().get_attr(nnplug.CPU, "api_version"))
data = np.load(sys.argv[1])
out = {}
for name in ("quantize", "dynamic"):
    with rt.load(onnx.load(sys.argv[1][:-3] + name + ".onnx"), backends=["cpu"]) as net:
        got = net.run({"x": data["x"]})
    out.update({f"{name}.{k}": v for k, v in got.items()})
np.savez(sys.argv[1][:-3] + "out.npz", **out)
"""


@pytest.mark.parametrize("isa", ["portable", None], ids=["portable", "best"])
def test_portable_and_vector_loops_give_onnxruntimes_bits(tmp_path, isa):
    """NNPLUG_CPU_ISA=portable runs the C loops the AVX-512 ones stand in for where the CPU
    has them; both give onnxruntime's bits (QuantizeLinear and DynamicQuantizeLinear)."""
    import os
    import subprocess
    import sys

    import onnx

    rng = np.random.default_rng(5)
    x = awkward(rng, 40001, 0.05)[12:]  # finite: DynamicQuantizeLinear's NaN rule is its own
    x[7] = np.float32(-40.0)
    q, _ = one_node_model("QuantizeLinear", [x, np.float32(0.05), np.int8(-3)], opset=19,
                          const_inputs=(1, 2))
    d, _ = one_node_model("DynamicQuantizeLinear", [x], outputs=3, opset=11)
    for name, m in (("quantize", q), ("dynamic", d)):
        m.graph.input[0].name = "x"
        m.graph.node[0].input[0] = "x"
        onnx.save(m, str(tmp_path / f"case.{name}.onnx"))
    np.savez(tmp_path / "case.npz", x=x)
    env = {k: v for k, v in os.environ.items() if k != "NNPLUG_CPU_ISA"}
    if isa:
        env["NNPLUG_CPU_ISA"] = isa
    done = subprocess.run([sys.executable, "-c", PORTABLE, str(tmp_path / "case.npz")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert ("portable" in done.stdout) == (isa == "portable"), done.stdout
    got = np.load(tmp_path / "case.out.npz")
    for name, m in (("quantize", q), ("dynamic", d)):
        for k, want in enumerate(onnxruntime(m, {"x": x})):
            np.testing.assert_array_equal(got[f"{name}.out{k}"], want, err_msg=f"{name} {k}")
