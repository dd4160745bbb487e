"""The vector kernels the backend picks by CPU give the same results: the AVX-512 GEMM tiles
(12 x 32 on CPUs with avx512f; for stride-1 convolutions they read the taps in place from a
zero-padded input) and the AVX2 kernel (6 x 16, on im2col columns), and the depthwise
convolution's 16- and 8-pixel vectors, compute every element with the same fused multiply-adds
in the same order, so their outputs are bit-identical on convolutions and matrix products of
every fused epilogue (bias, residual, Relu, Clip, LeakyRelu, HardSwish, SiLU, Gelu) and of
shapes off both kernels' tiles; a one-pixel convolution (matrix times vector) gives the bits
the GEMM gives that pixel in a wider image, with every kernel; the portable C kernel (no FMA)
matches onnxruntime. Winograd convolutions (conv_winograd.c) are among the cases: their
transforms are additions only, the same at every level. NNPLUG_CPU_ISA caps the kernels for a process, so each runs in its own."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

HAS_AVX512 = os.path.exists("/proc/cpuinfo") and " avx512f" in open("/proc/cpuinfo").read()

RUN = r"""
import sys, glob, os, numpy as np, onnx, nnplug, nnplug_backend_cpu
folder, threads = sys.argv[1], int(sys.argv[2])
rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
rt.register_backend(nnplug_backend_cpu.library_path())
lib = rt.backends["cpu"].backend
lib.set_num_threads(threads)
print(lib.device_api().get_attr(nnplug.CPU, "api_version"))
for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
    feeds = dict(np.load(path[:-5] + ".in.npz"))
    with rt.load(onnx.load(path), backends=["cpu"]) as net:
        out = net.run(feeds)
    np.savez(path[:-5] + f".{os.environ.get('NNPLUG_CPU_ISA', 'best')}.{threads}.npz", **out)
"""


def conv_case(rng, n, c, h, w, m, k, stride, pad, act, residual, group=1):
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((m, c // group, k, k), dtype=np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(m, dtype=np.float32), "b"),
             numpy_helper.from_array(np.array(-0.5, np.float32), "lo"),
             numpy_helper.from_array(np.array(0.7, np.float32), "hi")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)]
    feeds = {"x": x}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], kernel_shape=[k, k],
                              strides=[stride] * 2, pads=[pad] * 4, group=group)]
    last = "y0"
    if residual:
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        feeds["r"] = rng.standard_normal((n, m, oh, ow), dtype=np.float32)
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, feeds["r"].shape))
        nodes.append(helper.make_node("Add", [last, "r"], ["y1"]))
        last = "y1"
    if act == "silu":
        nodes += [helper.make_node("Sigmoid", [last], ["s"]), helper.make_node("Mul", [last, "s"], ["y"])]
    else:
        op, ins, attrs = {"none": ("Identity", [last], {}), "relu": ("Relu", [last], {}),
                          "clip": ("Clip", [last, "lo", "hi"], {}),
                          "leaky": ("LeakyRelu", [last], {"alpha": 0.3}),
                          "hardswish": ("HardSwish", [last], {})}[act]
        nodes.append(helper.make_node(op, ins, ["y"], **attrs))
    return nodes, inputs, inits, feeds


def matmul_case(rng, rows, k, n, gelu):
    x = rng.standard_normal((2, rows, k), dtype=np.float32)
    inits = [numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(n, dtype=np.float32), "b"),
             numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sq"),
             numpy_helper.from_array(np.array(1.0, np.float32), "one"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["z"])]
    if gelu:  # the exporters' exact Gelu, which the backend fuses into the product
        nodes += [helper.make_node("Div", ["z", "sq"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                  helper.make_node("Add", ["e", "one"], ["e1"]), helper.make_node("Mul", ["z", "e1"], ["g"]),
                  helper.make_node("Mul", ["g", "half"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["z"], ["y"]))
    return nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)], inits, {"x": x}


def one_pixel_cases(rng, c, m, act, residual):
    """The same 1x1 convolution on one pixel (the matrix-vector path) and on a 1 x 2 image whose
    first pixel is that one (the GEMM), for comparing the two."""
    wide = conv_case(rng, 1, c, 1, 2, m, 1, 1, 0, act, residual)
    nodes, inputs, inits, feeds = wide
    one = {k: np.ascontiguousarray(v[..., :1]) for k, v in feeds.items()}
    one_inputs = [helper.make_tensor_value_info(i.name, TensorProto.FLOAT, one[i.name].shape)
                  for i in inputs]
    return (nodes, one_inputs, inits, one), wide


def cases():
    rng = np.random.default_rng(11)
    out = {}
    # squeeze-excitation layers: m over one 64-panel chunk, K over one 256-deep block
    out["se-1px"], out["se-2px"] = one_pixel_cases(rng, 300, 400, "relu", True)
    out["se-small-1px"], out["se-small-2px"] = one_pixel_cases(rng, 20, 7, "leaky", False)
    # channels and pixels off both tiles (12 x 32 and 6 x 16); K over one 256-deep block
    for m in (5, 12, 13, 70):
        out[f"conv3x3-m{m}"] = conv_case(rng, 1, 40, 9, 11, m, 3, 1, 1, "relu", False)
    # stride 1: on AVX-512 the taps are read in place from a zero-padded input (16-lane slots
    # of the padded grid, crossing from one output row to the next), elsewhere packed columns
    out["conv3x3-rows"] = conv_case(rng, 1, 20, 15, 30, 13, 3, 1, 1, "relu", True)
    out["conv5x5-rows-grouped"] = conv_case(rng, 2, 12, 9, 17, 10, 5, 1, 2, "hardswish", False, group=2)
    out["conv3x3-rows-wide"] = conv_case(rng, 1, 40, 6, 40, 70, 3, 1, 0, "leaky", False)
    out["conv3x3-rows-7px"] = conv_case(rng, 1, 30, 7, 7, 19, 3, 1, 1, "clip", True)
    out["conv1x1-49px"] = conv_case(rng, 1, 300, 7, 7, 37, 1, 1, 0, "none", False)
    out["conv1x1-batch2"] = conv_case(rng, 2, 24, 13, 17, 30, 1, 1, 0, "clip", True)
    out["conv1x1-16ch"] = conv_case(rng, 1, 16, 20, 21, 40, 1, 1, 0, "relu", False)  # packed
    out["conv3x3s2"] = conv_case(rng, 1, 17, 23, 21, 25, 3, 2, 1, "leaky", True)
    out["conv-hardswish"] = conv_case(rng, 1, 8, 16, 16, 19, 3, 1, 1, "hardswish", False)
    out["conv-silu"] = conv_case(rng, 1, 8, 15, 16, 33, 3, 1, 1, "silu", True)
    # depthwise: rows of 14 and 28 pixels (16-wide vectors on AVX-512), of 7 (8-wide), stride 2
    out["dw3x3-14px"] = conv_case(rng, 1, 24, 14, 14, 24, 3, 1, 1, "relu", True, group=24)
    out["dw5x5-7px"] = conv_case(rng, 1, 40, 7, 7, 40, 5, 1, 2, "silu", False, group=40)
    out["dw3x3s2-28px"] = conv_case(rng, 2, 16, 56, 55, 16, 3, 2, 1, "clip", False, group=16)
    out["matmul-bias"] = matmul_case(rng, 17, 300, 45, False)
    out["matmul-gelu"] = matmul_case(rng, 29, 64, 100, True)
    # Winograd F(2x2, 3x3) (32+ in, 64+ out channels): partial tiles, batch, epilogues
    out["wino3x3-odd-residual"] = conv_case(rng, 1, 40, 9, 11, 70, 3, 1, 1, "relu", True)
    out["wino3x3-batch2-hardswish"] = conv_case(rng, 2, 33, 7, 8, 64, 3, 1, 1, "hardswish", False)
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("vector_kernels")
    made = {}
    for name, (nodes, inputs, inits, feeds) in cases().items():
        graph = helper.make_graph(nodes, name, inputs,
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
        with open(folder / f"{name}.onnx", "wb") as f:
            f.write(model.SerializeToString())
        np.savez(folder / f"{name}.in.npz", **feeds)
        made[name] = (model, feeds)
    return folder, made


def run_with(folder, isa, threads=1):
    env = dict(os.environ)
    env.pop("NNPLUG_CPU_ISA", None)
    if isa:
        env["NNPLUG_CPU_ISA"] = isa
    done = subprocess.run([sys.executable, "-c", RUN, str(folder), str(threads)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    tag = isa or "best"
    outs = {p.name.split(".")[0]: np.load(p)["y"] for p in folder.glob(f"*.{tag}.{threads}.npz")}
    return done.stdout.strip(), outs


@pytest.mark.skipif(not HAS_AVX512, reason="this CPU has no AVX-512: only the AVX2 kernel runs here")
@pytest.mark.parametrize("threads", [1, 2])
def test_avx512_tiles_are_bit_identical_to_the_avx2_kernel(models, threads):
    folder, made = models
    info512, wide = run_with(folder, None, threads)
    info2, narrow = run_with(folder, "avx2", threads)
    assert "avx512" in info512 and "avx512" not in info2, (info512, info2)
    assert sorted(wide) == sorted(narrow) == sorted(made)
    for name in made:
        np.testing.assert_array_equal(wide[name], narrow[name], err_msg=f"{name}: avx512 vs avx2")


def test_each_kernel_matches_onnxruntime(models):
    folder, made = models
    for isa in ("avx2", "portable", None):
        info, got = run_with(folder, isa)
        assert ("portable" in info) == (isa == "portable"), info
        for name, (model, feeds) in made.items():
            want = onnxruntime_run(model, feeds)[0]
            scale = max(float(np.abs(want).max()), 1.0)
            np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=2e-5 * scale,
                                       err_msg=f"{name} on {info}")


@pytest.mark.parametrize("isa", ["avx2", "portable", None])
def test_one_pixel_convolution_gives_the_gemm_bits(models, isa):
    folder, _ = models
    info, got = run_with(folder, isa)
    for name in ("se", "se-small"):
        one, wide = got[f"{name}-1px"], got[f"{name}-2px"]
        np.testing.assert_array_equal(one, wide[..., :1], err_msg=f"{name} on {info}")
