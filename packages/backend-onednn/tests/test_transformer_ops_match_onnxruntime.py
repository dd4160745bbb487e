"""Transformer and ConvNeXt / ShuffleNet building blocks against onnxruntime on random weights,
at 1 and 2 threads: MatMul with constant weights (run as a packed-weights 1x1 convolution or
inner product) with its bias Add, the exported exact GELU and the residual Add fused into it,
LayerNormalization, Erf, Reshape / Flatten / Transpose as views inside a kernel, an attention
block, channel shuffles, symbolic dims through a Reshape; and what is declined."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    AMX,
    BACKENDS,
    assert_matches,
    graph_model,
    onednn_log,
    onnxruntime_run,
    run_both,
)
from onnx import TensorProto, helper, numpy_helper

R = np.random.default_rng(2024)
SQRT2 = np.float32(1.4142135)


def rand(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


class Graph:
    """Nodes and initializers, each node named after its output."""

    def __init__(self):
        self.nodes, self.inits, self.n = [], {}, 0

    def const(self, value, dtype=np.float32):
        self.n += 1
        name = f"k{self.n}"
        self.inits[name] = np.asarray(value, dtype=dtype)
        return name

    def op(self, op, ins, **attrs):
        self.n += 1
        out = f"{op.lower()}{self.n}"
        self.nodes.append(helper.make_node(op, list(ins), [out], name=out, **attrs))
        return out

    def dense(self, x, k, n, bias=True, bias_first=False):
        y = self.op("MatMul", [x, self.const(rand(k, n, scale=1 / np.sqrt(k)))])
        if bias:
            b = self.const(rand(n))
            y = self.op("Add", [b, y] if bias_first else [y, b])
        return y

    def gelu(self, x, div=True, halve_first=False):
        """PyTorch's export of the exact GELU: x * (erf + 1), then * 0.5 (TorchScript), or with
        halve_first (erf + 1) * 0.5, then x * that (dynamo)."""
        d = self.op("Div", [x, self.const(SQRT2)]) if div else self.op("Mul", [x, self.const(np.float32(0.70710677))])
        a = self.op("Add", [self.op("Erf", [d]), self.const(np.float32(1.0))])
        if halve_first:
            return self.op("Mul", [x, self.op("Mul", [self.const(np.float32(0.5)), a])])
        return self.op("Mul", [self.op("Mul", [x, a]), self.const(np.float32(0.5))])

    def gelu_tanh(self, x):
        """Hugging Face's gelu_new (GPT-2's) as PyTorch exports it:
        0.5 x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * Pow(x, 3))))."""
        half = self.op("Mul", [x, self.const(np.float32(0.5))])
        cube = self.op("Mul", [self.op("Pow", [x, self.const(np.float32(3.0))]),
                               self.const(np.float32(0.044715))])
        inner = self.op("Mul", [self.op("Add", [x, cube]), self.const(np.float32(0.7978845608028654))])
        return self.op("Mul", [half, self.op("Add", [self.op("Tanh", [inner]), self.const(np.float32(1.0))])])

    def conv1d(self, x, t, k, n):
        """GPT-2's Conv1D as exported: Reshape to (T, K), Gemm with weights and bias, Reshape back."""
        flat = self.op("Reshape", [x, self.const([t, k], np.int64)])
        y = self.op("Gemm", [flat, self.const(rand(k, n, scale=1 / np.sqrt(k))), self.const(rand(n))])
        return self.op("Reshape", [y, self.const([1, t, n], np.int64)])

    def layernorm(self, x, c, axis=-1, bias=True, eps=1e-5):
        ins = [x, self.const(rand(c)), *([self.const(rand(c))] if bias else [])]
        return self.op("LayerNormalization", ins, axis=axis, epsilon=eps)

    def model(self, feeds, opset=18):
        return graph_model(self.nodes, feeds, self.inits, opset=opset)


def check(rt, g, feeds, threads, what, all_onednn=True, opset=18):
    model = g.model(feeds, opset)
    assignment, outs, want = run_both(rt, model, feeds, threads)
    if all_onednn:
        assert set(assignment.values()) == {"onednn"}, assignment
    for got, w in zip(outs, want):
        assert_matches(got, w, what=f"{what}, {threads} thread(s)")
    return assignment


# (leading dims, K, N): which primitive runs them depends on the CPU (K > 2N as an inner
# product on AMD's), so each runs as both
MATMUL_SHAPES = [((1, 16), 24, 40), ((2, 5), 64, 16), ((7,), 96, 32), ((3, 2, 4), 33, 17), ((1, 9), 128, 8)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dense", ["convolution", "inner_product"])
@pytest.mark.parametrize("lead,k,n", MATMUL_SHAPES)
def test_matmul_with_constant_weights_bias_gelu_and_residual(rt, lead, k, n, dense, threads, monkeypatch):
    monkeypatch.setenv("NNPLUG_ONEDNN_DENSE", dense)
    g = Graph()
    y = g.gelu(g.dense("x", k, n, bias_first=True))
    y = g.op("Add", [g.dense(y, n, k), "x"])  # the residual: a sum post-op
    check(rt, g, {"x": rand(*lead, k)}, threads, f"dense {lead} {k}->{n} as {dense}")


@pytest.mark.parametrize("threads", [1, 2])
def test_gelu_written_with_mul_by_inverse_sqrt2_and_unfused_erf(rt, threads):
    g = Graph()
    y = g.gelu(g.dense("x", 16, 24), div=False)
    g.op("Erf", [g.op("Relu", [y])])  # an Erf outside a GELU: the backend's own loop
    check(rt, g, {"x": rand(2, 3, 16)}, threads, "gelu / erf")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("lead,k,n", MATMUL_SHAPES)
def test_gelu_halved_first_as_dynamo_exports_it(rt, lead, k, n, threads):
    g = Graph()
    g.op("Add", [g.dense(g.gelu(g.dense("x", k, n), halve_first=True), n, k), "x"])
    check(rt, g, {"x": rand(*lead, k)}, threads, f"dense {lead} {k}->{n}, gelu halved first")


def tanh_gelu_graph(behind_reshape: bool, t=6, k=32, n=64) -> Graph:
    """dense -> tanh GELU -> dense -> residual Add, the dense layers as MatMul + bias or, behind
    a Reshape, as GPT-2's Conv1D."""
    g = Graph()
    dense = (lambda x, a, b: g.conv1d(x, t, a, b)) if behind_reshape else g.dense
    g.op("Add", [dense(g.gelu_tanh(dense("x", k, n)), n, k), "x"])
    return g


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("behind_reshape", [False, True])
def test_tanh_gelu_after_a_dense_layer_or_its_reshape(rt, behind_reshape, threads):
    """oneDNN's gelu_tanh post-op against onnxruntime's eight ops: within 1e-4 of the output's
    range (oneDNN's tanh is its own approximation, a few ulp from libm's)."""
    check(rt, tanh_gelu_graph(behind_reshape), {"x": rand(1, 6, 32)}, threads,
          f"tanh gelu, behind a reshape: {behind_reshape}")


def gelu_after_layernorm_graph(kind: str) -> Graph:
    """LayerNormalization (which takes no post-ops here) -> an exported GELU."""
    g = Graph()
    y = g.layernorm("x", 24)
    (g.gelu if kind == "erf" else g.gelu_tanh)(y)
    return g


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["erf", "tanh"])
def test_a_gelu_after_an_op_without_post_ops(rt, kind, threads):
    check(rt, gelu_after_layernorm_graph(kind), {"x": rand(2, 7, 24)}, threads, f"gelu {kind}")


@pytest.mark.parametrize("kind", ["erf", "tanh"])
def test_a_gelu_after_an_op_without_post_ops_is_one_eltwise_step(kind):
    """Where the op before it takes no post-ops (a LayerNormalization here, a loop of the
    backend's own that oneDNN does not log; wav2vec2's GroupNorm), the exported GELU is one
    oneDNN eltwise primitive, not five or eight steps with a scalar Erf loop."""
    lines = onednn_log("from test_transformer_ops_match_onnxruntime import rand, gelu_after_layernorm_graph\n"
                       f"g = gelu_after_layernorm_graph({kind!r})\n"
                       "feeds = {'x': rand(2, 7, 24)}\nmodel = g.model(feeds)")
    kinds = [ln.split(",")[3] for ln in lines if ",reorder," not in ln]
    assert kinds == ["eltwise"], lines
    assert f"eltwise_gelu_{kind}" in next(ln for ln in lines if ",eltwise," in ln), lines


SCALED_DENSE = """
from test_transformer_ops_match_onnxruntime import Graph, rand
import numpy as np
g = Graph()
g.op("Mul", [g.dense("x", 32, 48), g.const(np.float32(0.125))])  # Whisper's scaled q_proj
feeds = {"x": rand(1, 6, 32)}
model = g.model(feeds)
"""


def test_a_scale_right_after_a_dense_layer_is_its_post_op(rt):
    """MatMul, bias Add, then a Mul by a constant scalar (Whisper's and BART's query
    projection): one primitive with a linear post-op (c * x + -0, which is c * x for every x,
    -0 included), no binary step; the same bits as onnxruntime's three ops (one rounding
    each: the bias add, then the scale)."""
    lines = onednn_log(SCALED_DENSE)
    execs = [ln for ln in lines if ",reorder," not in ln]
    assert len(execs) == 1 and "eltwise_linear:0.125" in execs[0], lines
    scope: dict = {}
    exec(SCALED_DENSE, scope)
    for threads in (1, 2):
        placed, got, want = run_both(rt, scope["model"], scope["feeds"], threads)
        assert set(placed.values()) == {"onednn"}, placed
        assert_matches(got[0], want[0], rtol=1e-5, what=f"scaled dense, {threads} thread(s)")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cube_outside_a_gelu_is_onnxruntimes_to_the_bit(rt, threads):
    """Pow(x, 3) alone: the backend's own loop, x * x * x as onnxruntime computes it (specials:
    NaN, infinities, -0.0, denormals, values whose cube overflows)."""
    g = Graph()
    g.op("Pow", ["x", g.const(np.float32(3.0))])
    x = rand(4, 50, scale=3.0)
    x[0, :8] = [np.nan, np.inf, -np.inf, -0.0, 1e-40, -1e-40, 1e13, -1e13]
    model = g.model({"x": x})
    assignment, outs, want = run_both(rt, model, {"x": x}, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    got, nan = outs[0], np.isnan(want[0])
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[0][~nan].view(np.uint32))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("c_shape", [(12,), (1, 12), (1,), (5, 12)])
def test_gemm_with_constant_bias(rt, c_shape, threads):
    g = Graph()
    w, c = g.const(rand(12, 20)), g.const(rand(*c_shape))
    g.op("Relu", [g.op("Gemm", ["x", w, c], transB=1)])
    check(rt, g, {"x": rand(5, 20)}, threads, f"gemm transB, C {c_shape}")


@pytest.mark.parametrize("threads", [1, 2])
def test_silu_after_conv_and_matmul_is_a_swish_post_op(rt, threads):
    """EfficientNet's SiLU, Mul(x, Sigmoid(x)), after a Conv and after a dense layer; a Mul by
    the Sigmoid of another value is not SiLU."""
    g = Graph()
    y = g.op("Conv", ["x", g.const(rand(6, 3, 3, 3)), g.const(rand(6))], pads=[1] * 4)
    y = g.op("Mul", [g.op("Sigmoid", [y]), y])
    y = g.op("Flatten", [g.op("GlobalAveragePool", [y])])
    y = g.dense(y, 6, 10)
    y = g.op("Mul", [y, g.op("Sigmoid", [y])])
    g.op("Mul", [y, g.op("Sigmoid", [g.op("Neg", [y])])])
    check(rt, g, {"x": rand(2, 3, 7, 7)}, threads, "silu")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("shape,axis,bias", [((2, 7, 32), -1, True), ((5, 24), 1, False), ((2, 3, 4, 5), 2, True),
                                              ((4, 6), 0, True), ((1, 197, 64), 2, True)])
def test_layernormalization(rt, shape, axis, bias, threads):
    g = Graph()
    c = int(np.prod(shape[axis:]))
    ins = ["x", g.const(rand(*shape[axis:])), *([g.const(rand(*shape[axis:]))] if bias else [])]
    g.op("LayerNormalization", ins, axis=axis, epsilon=1e-6)
    assert c > 0
    check(rt, g, {"x": rand(*shape, scale=3.0) + 1.0}, threads, f"layernorm {shape} axis {axis}")


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("perm", [[0, 2, 1, 3], [0, 2, 3, 1], [3, 1, 0, 2], None])
def test_transpose_inside_a_kernel(rt, perm, threads):
    g = Graph()
    t = g.op("Transpose", [g.op("Relu", ["x"])], **({"perm": perm} if perm else {}))
    g.op("Sigmoid", [t])
    check(rt, g, {"x": rand(2, 3, 4, 5)}, threads, f"transpose {perm}")


# (A's shape, A's perm, B's shape, B's perm): the operands as they are before their Transpose
# (None: no Transpose); the product reads the permuted views in place
STRIDED_MATMULS = [
    ((1, 13, 3, 8), [0, 2, 1, 3], (1, 13, 3, 8), [0, 2, 3, 1]),  # Q K^T as BERT exports it
    ((2, 3, 9, 9), None, (2, 9, 3, 5), [0, 2, 1, 3]),  # attn V
    ((2, 3, 7, 5), [0, 1, 3, 2], (2, 3, 7, 6), None),  # A^T B
    ((2, 1, 6, 11), [0, 1, 3, 2], (1, 4, 4, 6), [0, 1, 3, 2]),  # both transposed, batch broadcast
    ((3, 17, 33), [1, 0, 2], (33, 17, 5), [1, 0, 2]),  # batch is the middle axis
    ((4, 5, 6), [2, 1, 0], (6, 4, 3), None),  # reversed axes: oneDNN may not read it in place
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("a_shape,a_perm,b_shape,b_perm", STRIDED_MATMULS)
def test_batched_matmul_reads_transposed_views(rt, a_shape, a_perm, b_shape, b_perm, threads):
    g = Graph()
    a = g.op("Relu", ["a"])
    b = g.op("Sigmoid", ["b"])
    if a_perm:
        a = g.op("Transpose", [a], perm=a_perm)
    if b_perm:
        b = g.op("Transpose", [b], perm=b_perm)
    g.op("Tanh", [g.op("MatMul", [a, b])])
    check(rt, g, {"a": rand(*a_shape), "b": rand(*b_shape)}, threads, f"matmul {a_shape}{a_perm} x {b_shape}{b_perm}")


def attention_block(s=10, h=4, d=8):
    """BERT's self-attention as PyTorch exports it: projections, Reshape to heads, Transpose,
    Q and K^T each scaled by d^-1/4, Q K^T, masked Softmax, times V, back to (tokens, hidden),
    output projection, residual and LayerNormalization: (graph, feeds)."""
    hid = h * d
    g = Graph()
    heads = g.const(np.array([0, 0, h, d]), np.int64)
    q = g.op("Transpose", [g.op("Reshape", [g.dense("x", hid, hid), heads])], perm=[0, 2, 1, 3])
    k = g.op("Transpose", [g.op("Reshape", [g.dense("x", hid, hid), heads])], perm=[0, 2, 3, 1])
    v = g.op("Transpose", [g.op("Reshape", [g.dense("x", hid, hid), heads])], perm=[0, 2, 1, 3])
    scale = g.const(np.float32(d ** -0.25))
    scores = g.op("MatMul", [g.op("Mul", [q, scale]), g.op("Mul", [scale, k])])
    p = g.op("Softmax", [g.op("Add", [scores, "mask"])], axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [p, v])], perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.const(np.array([1, -1, hid]), np.int64)])
    g.layernorm(g.op("Add", [g.dense(ctx, hid, hid), "x"]), hid, eps=1e-12)
    feeds = {"x": rand(1, s, hid), "mask": np.where(R.random((1, 1, 1, s)) < 0.2, -1e4, 0).astype(np.float32)}
    return g, feeds


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_block_stays_in_onednn(rt, threads):
    g, feeds = attention_block()
    check(rt, g, feeds, threads, "attention")


def test_q_and_k_scales_behind_their_views_are_post_ops():
    """The Muls scaling Q and K^T after their heads' Reshape and Transpose are linear post-ops
    (c * x + -0, which keeps -0) of the Q and K projections: no binary step, and no reorder
    of Q or K^T into a plain layout for one."""
    lines = onednn_log("from test_transformer_ops_match_onnxruntime import attention_block\n"
                       "g, feeds = attention_block()\nmodel = g.model(feeds)")
    dense = [ln for ln in lines if ",convolution," in ln or ",inner_product," in ln]
    scaled = [ln for ln in dense if "eltwise_linear:0.594604" in ln]  # 8 ** -0.25
    assert len(dense) == 4 and len(scaled) == 2, dense
    assert not [ln for ln in lines if ",binary," in ln and "binary_mul" in ln], lines


@pytest.mark.parametrize("threads", [1, 2])
def test_convnext_block_with_nhwc_views(rt, threads):
    """Depthwise 7x7 Conv, Transpose to NHWC (a view of the convolution's nhwc output),
    LayerNormalization, MLP with GELU, a per-channel scale, Transpose back, residual."""
    c = 16
    g = Graph()
    y = g.op("Conv", ["x", g.const(rand(c, 1, 7, 7, scale=0.2)), g.const(rand(c))], group=c, pads=[3] * 4)
    y = g.layernorm(g.op("Transpose", [y], perm=[0, 2, 3, 1]), c, eps=1e-6)
    y = g.dense(g.gelu(g.dense(y, c, 4 * c)), 4 * c, c)
    y = g.op("Transpose", [g.op("Mul", [y, g.const(rand(c))])], perm=[0, 3, 1, 2])
    g.op("Add", ["x", y])
    check(rt, g, {"x": rand(1, c, 9, 9)}, threads, "convnext block")


@pytest.mark.parametrize("threads", [1, 2])
def test_channel_shuffle_stays_in_one_kernel(rt, threads):
    """ShuffleNet's Reshape (N, g, C/g, H, W) -> Transpose -> Reshape between convolutions."""
    g = Graph()
    y = g.op("Relu", [g.op("Conv", ["x", g.const(rand(12, 6, 1, 1))])])
    y = g.op("Reshape", [y, g.const(np.array([1, 3, 4, 5, 5]), np.int64)])
    y = g.op("Transpose", [y], perm=[0, 2, 1, 3, 4])
    y = g.op("Reshape", [y, g.const(np.array([1, 12, 5, 5]), np.int64)])
    g.op("Conv", [y, g.const(rand(12, 1, 3, 3)), g.const(rand(12))], group=12, pads=[1] * 4)
    check(rt, g, {"x": rand(1, 6, 5, 5)}, threads, "channel shuffle")


@pytest.mark.parametrize("threads", [1, 2])
def test_densenet_concat_of_many_layers(rt, threads):
    """DenseNet concatenates every earlier layer's output: a Concat of 40 inputs, then
    BatchNormalization, Relu and a 1x1 Conv."""
    g = Graph()
    feats = [g.op("Relu", [g.op("Conv", ["x", g.const(rand(2, 3, 3, 3))], pads=[1] * 4)]) for _ in range(39)]
    y = g.op("Concat", ["x", *feats], axis=1)
    c = 3 + 2 * 39
    bn = [g.const(rand(c)), g.const(rand(c)), g.const(rand(c)), g.const(np.abs(rand(c)) + 0.5)]
    g.op("Conv", [g.op("Relu", [g.op("BatchNormalization", [y, *bn])]), g.const(rand(8, c, 1, 1))])
    check(rt, g, {"x": rand(1, 3, 6, 6)}, threads, "concat of 40")


def test_flatten_and_reshape_as_the_kernel_output(rt):
    g = Graph()
    y = g.op("Flatten", [g.op("Relu", ["x"])], axis=2)
    g.op("Reshape", [g.op("Sigmoid", [y]), g.const(np.array([-1, 5]), np.int64)])
    check(rt, g, {"x": rand(2, 3, 4, 5)}, 1, "flatten / reshape")


@pytest.mark.parametrize("seq", [5, "S"])
def test_symbolic_dims_through_a_reshape_with_a_constant_shape(rt, seq):
    g = Graph()
    y = g.op("Reshape", [g.dense("x", 8, 12), g.const(np.array([0, -1, 3, 4]), np.int64)])
    g.op("Softmax", [g.op("Transpose", [y], perm=[0, 2, 1, 3])], axis=-1)
    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", seq, 8])]
    out = helper.make_tensor_value_info(g.nodes[-1].output[0], TensorProto.FLOAT, None)
    ini = [numpy_helper.from_array(v, k) for k, v in g.inits.items()]
    model = helper.make_model(helper.make_graph(g.nodes, "g", gin, [out], ini),
                              opset_imports=[helper.make_opsetid("", 18)])
    with rt.load(model, backends=BACKENDS) as net:
        if seq == "S":  # a sequence that may change per run: every node is left to cpu, the
            # product of a constant weight too (its rows change with the sequence)
            assert set(net.assignment.values()) == {"cpu"}, net.assignment
        else:  # only the batch is symbolic: plans kept per batch size
            assert set(net.assignment.values()) == {"onednn"}, net.assignment
        for shape in ((1, 5, 8), (3, 5, 8), (1, 5, 8)) if seq == 5 else ((1, 5, 8), (3, 2, 8)):
            feeds = {"x": rand(*shape)}
            got = net.run(feeds)[net.outputs[0].name]
            assert_matches(got, onnxruntime_run(model, feeds)[0], what=f"shape {shape}")


DECLINED = {
    "layernorm_broadcast_scale": lambda g: g.op("LayerNormalization", ["x", g.const(rand(1))], axis=-1),
    "reshape_runtime_shape_symbolic_output": lambda g: g.op("Reshape", ["x", "shape"]),
}


@pytest.mark.parametrize("case", sorted(DECLINED))
def test_what_onednn_cannot_match_is_declined_to_the_cpu_backend(rt, case):
    g = Graph()
    DECLINED[case](g)
    feeds = {"x": rand(2, 4, 5)}
    gin = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 5])]
    if case == "reshape_runtime_shape_symbolic_output":
        feeds["shape"] = np.array([4, 10], np.int64)
        gin.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    out = helper.make_tensor_value_info(g.nodes[-1].output[0], TensorProto.FLOAT, None)
    ini = [numpy_helper.from_array(v, k) for k, v in g.inits.items()]
    model = helper.make_model(helper.make_graph(g.nodes, "g", gin, [out], ini),
                              opset_imports=[helper.make_opsetid("", 18)])
    with rt.load(model, backends=BACKENDS) as net:
        assert set(net.assignment.values()) == {"cpu"}, net.assignment
        got = net.run(feeds)[net.outputs[0].name]
    assert_matches(got, onnxruntime_run(model, feeds)[0], what=case)


SETUP = """
from test_transformer_ops_match_onnxruntime import Graph, rand
g = Graph()
g.op("Add", [g.dense(g.gelu(g.dense("x", 32, 64)), 64, 32), "x"])
feeds = {"x": rand(1, 6, 32)}
model = g.model(feeds)
"""


def test_dense_gelu_dense_residual_is_two_primitives_with_post_ops():
    """oneDNN's own log: MatMul + bias + GELU is one packed-weights primitive with a gelu_erf
    post-op, MatMul + bias + residual Add one with a sum post-op; besides them only the copy of
    the residual (a kernel input) into the kernel's output, which the sum accumulates into."""
    lines = onednn_log(SETUP)
    execs = [ln for ln in lines if ",reorder," not in ln]
    assert len(lines) <= 3 and len(execs) == 2, lines
    assert "eltwise_gelu_erf" in execs[0] and "sum" in execs[1], execs
    for e in execs:
        assert ",convolution," in e or ",inner_product," in e, e
        assert "gemm" not in e.split(",")[4] and not e.split(",")[4].startswith("ref"), e


def test_gelu_halved_first_is_a_gelu_erf_post_op():
    """The dynamo exporter's order of the GELU's last two Muls is one post-op too."""
    lines = onednn_log(SETUP.replace('g.dense("x", 32, 64)', 'g.dense("x", 32, 64), halve_first=True'))
    execs = [ln for ln in lines if ",reorder," not in ln]
    assert len(execs) == 2 and "eltwise_gelu_erf" in execs[0] and "sum" in execs[1], execs


@pytest.mark.parametrize("behind_reshape", [False, True])
def test_tanh_gelu_is_a_gelu_tanh_post_op(behind_reshape):
    """The exported tanh GELU (eight ops) is one gelu_tanh post-op of the dense layer before
    it, also when a Reshape stands between them (GPT-2's Conv1D); then only the second dense
    layer, whose residual Add is a sum post-op, or a binary add behind its Reshape."""
    lines = onednn_log("from test_transformer_ops_match_onnxruntime import rand, tanh_gelu_graph\n"
                       f"g = tanh_gelu_graph({behind_reshape})\n"
                       "feeds = {'x': rand(1, 6, 32)}\nmodel = g.model(feeds)")
    execs = [ln for ln in lines if ",reorder," not in ln]
    assert "eltwise_gelu_tanh" in execs[0] and ",eltwise," not in "".join(execs), execs
    if behind_reshape:
        assert len(execs) == 3 and "binary_add" in execs[2], execs
    else:
        assert len(execs) == 2 and "sum" in execs[1], execs


def test_under_the_bf16_hint_a_dense_layer_read_by_dense_layers_writes_bf16(rt):
    """Under the bf16 hint on AMX, a dense layer whose result only dense layers read (an FFN's
    first, its GELU fused) writes it in bf16, which the second converted to anyway: no
    reorder between them (Whisper-tiny: 1.4 ms of reorders a run). Its second layer, the
    kernel's output, stays float32; without AMX every operand does. Within 2e-2 of the range
    of onnxruntime's float32, the bound of the hint's other tests."""
    with open("/proc/cpuinfo") as f:
        amx = "amx_bf16" in f.read().split()
    lines = [ln.split(",") for ln in onednn_log(SETUP, env={"NNPLUG_PRECISION": "bf16"})]
    dense = [f[6] for f in lines if f[3] in ("convolution", "inner_product")]
    to_bf16 = [f for f in lines if f[3] == "reorder" and "dst_bf16" in f[6]]
    assert len(dense) == 2, lines
    if amx:
        assert "dst_bf16" in dense[0] and "src_bf16" in dense[1] and "dst_f32" in dense[1], dense
        assert len(to_bf16) == 1 and to_bf16[0][-2] == "1x32x1x6", to_bf16  # the input alone
    else:
        assert not any("bf16" in d for d in dense) and not to_bf16, lines
    scope: dict = {}
    exec(SETUP, scope)
    targets = {"onednn": {"kind": "onednn", "precision": "bf16"}}
    for threads in (1, 2):
        placed, got, want = run_both(rt, scope["model"], scope["feeds"], threads, targets=targets)
        assert set(placed.values()) == {"onednn"}, placed
        assert_matches(got[0], want[0], rtol=2e-2, what=f"bf16 FFN, {threads} thread(s)")


@pytest.mark.parametrize("dense", ["convolution", "inner_product"])
def test_dense_primitive_can_be_chosen(dense):
    """NNPLUG_ONEDNN_DENSE picks the primitive a MatMul with constant weights runs as."""
    lines = onednn_log(SETUP, env={"NNPLUG_ONEDNN_DENSE": dense})
    execs = [ln for ln in lines if ",reorder," not in ln]
    assert len(execs) == 2 and all(f",{dense}," in e for e in execs), execs


@pytest.mark.parametrize("rows,ip", [(127, False), (128, True), (197, False), (1500, True)])
def test_under_the_bf16_hint_dense_layers_of_128_rows_or_more_in_blocks_of_64_are_inner_products(
        rt, rows, ip):
    """Under the bf16 hint on AMX a dense layer of 128 rows or more runs as an inner product
    (5-20% faster there on transformers' shapes), one of fewer rows as a 1x1 convolution
    (whose weights streamed faster where the layer is bound by reading them), and so does one
    whose rows leave the inner product's last block of 64 mostly empty (ViT's 197: the block
    costs a whole one; Whisper's 1500 fill 1536 to a sixteenth); in float32, and without AMX,
    both are convolutions. The answers within 2e-2 of onnxruntime's range."""
    setup = SETUP.replace("rand(1, 6, 32)", f"rand(1, {rows}, 32)")
    for env in ({"NNPLUG_PRECISION": "bf16"}, {}):
        lines = onednn_log(setup, env=env)
        kinds = [ln.split(",")[3] for ln in lines if ",reorder," not in ln]
        want = "inner_product" if AMX and env and ip else "convolution"
        assert kinds == [want] * 2, (env, kinds)
    scope: dict = {}
    exec(setup, scope)
    targets = {"onednn": {"kind": "onednn", "precision": "bf16"}}
    placed, got, want = run_both(rt, scope["model"], scope["feeds"], 2, targets=targets)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=2e-2, what=f"bf16 dense layers of {rows} rows")


# Rows a masked Softmax meets (torch's export then maps NaN to 0 with Where(IsNaN(p), 0, p)):
# onnxruntime gives a whole row of NaN for a row of -inf only, or with a NaN or +inf in it
# (oneDNN's own kernel only where the NaN or +inf is: the backend makes it the whole row)
SOFTMAX_ROWS = {
    "finite": [0.5, 1.0, -3.0, 0.0, 2.0],
    "some -inf": [1.0, -np.inf, 2.0, -np.inf, 3.0],
    "all -inf": [-np.inf] * 5,
    "a NaN": [0.5, 1.0, np.nan, 0.0, 2.0],
    "a +inf": [0.5, np.inf, 1.0, 0.0, 2.0],
    "+inf and -inf": [np.inf, -np.inf, 1.0, 0.0, 2.0],
}


@pytest.mark.parametrize("then", ["", "Mul"])  # the result leaves the kernel, or is read in it
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("row", SOFTMAX_ROWS.values(), ids=SOFTMAX_ROWS.keys())
@pytest.mark.parametrize("axis", [-1, 1])
def test_softmax_of_non_finite_rows(rt, row, threads, op, then, axis):
    g = Graph()
    y = g.op(op, [g.op("Add", ["x", "m"])], axis=axis)
    if then:
        g.op(then, [y, "x"])
    x = rand(2, 3, 5) if axis == -1 else rand(2, 5, 3)
    m = np.zeros(x.shape, np.float32)
    if axis == -1:
        m[1, 1] = row
    else:
        m[1, :, 1] = row
    model = g.model({"x": x, "m": m})
    assignment, outs, want = run_both(rt, model, {"x": x, "m": m}, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_attention_sized_rows_with_a_nan(rt, threads, op):
    """Rows of 1,000 (the NaN check runs on whole vectors and a tail) in a result large enough
    to be shared between threads: a NaN in the first, a middle and the last row, at the row's
    start, middle and end, makes exactly those rows NaN."""
    g = Graph()
    g.op(op, [g.op("Add", ["x", "m"])], axis=-1)
    x = rand(2, 40, 1000)
    m = np.zeros(x.shape, np.float32)
    for b, r, i in [(0, 0, 0), (0, 23, 517), (1, 39, 999), (1, 7, 992)]:
        m[b, r, i] = np.nan
    model = g.model({"x": x, "m": m})
    assignment, outs, want = run_both(rt, model, {"x": x, "m": m}, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert np.isnan(want[0]).any(axis=-1).sum() == 4
    np.testing.assert_allclose(outs[0], want[0], rtol=1e-5, atol=1e-5, equal_nan=True)
