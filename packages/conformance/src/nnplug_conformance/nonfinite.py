"""Non-finite inputs for backend tests: one small model per op a backend may claim (and the
chains backends fuse), fed NaN, +-inf, -0.0, a denormal and values near exp's and float32's
limits, and finite inputs that make a NaN inside the graph; and the rule an answer must meet.
Shared by the backends' own tests (see docs/conformance.md, *Non-finite inputs*).

The rule is onnxruntime's answer: the same NaN positions, the same infinities, finite values
within 1e-4 relative. Where onnxruntime's answer depends on its kernel rather than on the op
it is replaced, by a NumPy formula of the op in float32:

- MaxPool and GlobalMaxPool: a window holding a NaN gives NaN, a window of only -inf -inf.
  onnxruntime's answer depends on its kernel and the CPU, not on the window: MLAS starts at
  -FLT_MAX and drops a NaN in its scalar kernels (1-D, 3-D, 2-D tails; a window of only -inf
  or NaN gives -3.4e38) and keeps one in its SSE 2-D kernel until the next tap replaces it
  (ARM's vmaxq_f32 keeps every NaN); the ONNX reference drops it everywhere. Copying one of
  those would give a wrong answer elsewhere, so nnplug never lets a NaN vanish.
- LRN: onnxruntime keeps a running sum of squares along the channels, so one infinity (inf -
  inf) spreads NaN to every later channel; the formula gives it only to windows holding it.
- ReduceMax and ReduceMin: a NaN gives NaN (numpy's max and min); onnxruntime drops it.
- Hardmax: 1 at numpy's argmax, the first NaN of a row holding one (onnxruntime's Hardmax row
  then has no 1). ArgMax and ArgMin take onnxruntime's answer, which follows one rule on every
  CPU: a running comparison from the row's first element, so a NaN is picked only when first.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

# Every special value, and the set used where an op accumulates (values near 1e30 would cancel
# there in an order that differs between correct kernels).
SPECIAL = (np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 88.8, -88.8, 100.0, -100.0, 1e-40)
SPECIAL_ACCUMULATING = (np.nan, np.inf, -np.inf, -0.0, 0.0, 88.8, -88.8, 100.0, -100.0, 1e-40)

UNARY = ("Relu", "Sigmoid", "Tanh", "Elu", "Abs", "Neg", "Exp", "Log", "Sqrt", "HardSigmoid",
         "HardSwish", "Erf", "Celu", "Selu", "Softplus", "Softsign", "Mish", "ThresholdedRelu",
         "Shrink", "Sign", "Round", "Floor", "Ceil", "Reciprocal", "Sin", "Cos", "Atan", "Sinh",
         "Asinh")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min")
# reductions over the channels; those that add up values of either sign get no +-1e30
REDUCE = ("ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp")
REDUCE_ACCUMULATING = ("ReduceSum", "ReduceMean", "ReduceProd")


def special_array(shape, rng, values=SPECIAL) -> np.ndarray:
    """Standard normal values times 3 with each special value written at three random places
    (fewer when the array is small)."""
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, min(flat.size, 3 * len(values)), replace=False)
    for k, i in enumerate(idx):
        flat[i] = values[k % len(values)]
    return x


def model(nodes, feeds: dict, inits: dict, opset: int = 18) -> onnx.ModelProto:
    """A model of ``nodes`` whose inputs are ``feeds`` and initializers ``inits`` (float ones
    as float32); its output is the last node's first output ``y``, typed by shape inference."""
    gin = [helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, v.shape) for k, v in feeds.items()]
    ini = [numpy_helper.from_array(np.asarray(v, np.float32) if np.asarray(v).dtype.kind == "f" else np.asarray(v), k)
           for k, v in inits.items()]
    probe = helper.make_model(helper.make_graph(nodes, "g", gin, [], ini),
                              opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    m = helper.make_model(helper.make_graph(nodes, "g", gin, [inferred["y"]], ini),
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = min(m.ir_version, 9)  # older onnxruntime builds (Python 3.10) read no newer IR
    return m


def _node(op, ins, out="y", **attrs):
    return helper.make_node(op, ins, [out], name=out, **attrs)


def cases(seed: int = 2) -> dict:
    """name -> (model, feeds, formula): ``formula(feeds, run)`` gives the expected output where
    it replaces onnxruntime's (see the module's docstring), else it is None; ``run(model,
    feeds)`` is the caller's onnxruntime, for the part of a chain before the pooling."""
    rng = np.random.default_rng(seed)
    x = special_array((2, 16, 9, 9), rng)
    x2 = special_array((2, 16, 9, 9), rng)
    xa = special_array((2, 16, 9, 9), rng, SPECIAL_ACCUMULATING)
    c = 16
    w = (rng.standard_normal((c, c, 3, 3)) / 12).astype(np.float32)
    w64 = (rng.standard_normal((64, 16, 3, 3)) / 12).astype(np.float32)
    bn = {"s": rng.uniform(0.5, 2, c), "t": rng.standard_normal(c), "m": rng.standard_normal(c),
          "v": rng.uniform(0.5, 2, c)}
    lo, hi = np.float32(0), np.float32(6)
    out = {}

    def add(name, nodes, feeds, inits=None, formula=None, opset=18):
        out[name] = (model(nodes, feeds, inits or {}, opset), feeds, formula)

    for op in UNARY:
        add(op, [_node(op, ["x"])], {"x": x})
    add("LeakyRelu", [_node("LeakyRelu", ["x"], alpha=0.1)], {"x": x})
    add("Clip", [_node("Clip", ["x", "lo", "hi"])], {"x": x}, {"lo": lo, "hi": hi})
    add("Clip-min-above-max", [_node("Clip", ["x", "lo", "hi"])], {"x": x}, {"lo": hi, "hi": lo})
    for op in BINARY:
        add(op, [_node(op, ["x", "x2"])], {"x": x, "x2": x2})
        add(f"{op}-broadcast", [_node(op, ["x", "k"])], {"x": x},
            {"k": special_array((16, 1, 1), rng)})
    add("Pow-2", [_node("Pow", ["x", "e"])], {"x": x}, {"e": np.float32(2)})
    add("Pow-0.5", [_node("Pow", ["x", "e"])], {"x": x}, {"e": np.float32(0.5)})
    add("PRelu", [_node("PRelu", ["x", "k"])], {"x": x}, {"k": rng.standard_normal((16, 1, 1))})
    add("Sum-3", [_node("Sum", ["x", "x2", "x"])], {"x": x, "x2": x2})
    add("Max-3", [_node("Max", ["x", "x2", "x"])], {"x": x, "x2": x2})
    add("Mean-2", [_node("Mean", ["x", "x2"])], {"x": x, "x2": x2})
    axes = np.array([1], np.int64)
    for op in REDUCE + REDUCE_ACCUMULATING:
        formula = None
        if op in ("ReduceMax", "ReduceMin"):  # numpy's max and min propagate NaN
            f = np.max if op == "ReduceMax" else np.min
            formula = lambda fd, run, f=f: f(fd["x"], axis=1, keepdims=True)  # noqa: E731
        add(op, [_node(op, ["x", "axes"])], {"x": x if op in REDUCE else xa}, {"axes": axes}, formula)
    add("Hardmax", [_node("Hardmax", ["x"], axis=-1)], {"x": x}, formula=lambda f, run: hardmax(f["x"]))
    for op in ("ArgMax", "ArgMin"):
        add(op, [_node(op, ["x"], axis=1)], {"x": x})
        add(f"{op}-last", [_node(op, ["x"], axis=1, select_last_index=1)], {"x": x})
    add("InstanceNormalization", [_node("InstanceNormalization", ["x", "g", "b"])], {"x": xa},
        {"g": rng.standard_normal(c), "b": rng.standard_normal(c)})
    add("LpNormalization", [_node("LpNormalization", ["x"], axis=-1)], {"x": xa})
    add("MeanVarianceNormalization", [_node("MeanVarianceNormalization", ["x"])], {"x": xa})
    add("Resize-linear", [_node("Resize", ["x", "", "scales"], mode="linear")], {"x": xa},
        {"scales": np.array([1, 1, 2, 2], np.float32)})
    add("ConvTranspose", [_node("ConvTranspose", ["x", "w"])], {"x": xa},
        {"w": (rng.standard_normal((c, 8, 3, 3)) / 12)})
    add("LpPool", [_node("LpPool", ["x"], kernel_shape=[2, 2])], {"x": xa})
    pool = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}
    add("MaxPool", [_node("MaxPool", ["x"], **pool)], {"x": x},
        formula=lambda f, run: max_pool(f["x"], 3, 1, 1))
    add("MaxPool-stride2", [_node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])], {"x": x},
        formula=lambda f, run: max_pool(f["x"], 2, 2, 0))
    add("MaxPool-nan-beside-inf", [_node("MaxPool", ["x"], kernel_shape=[2, 2], strides=[2, 2])],
        {"x": nan_beside_inf()}, formula=lambda f, run: max_pool(f["x"], 2, 2, 0))
    add("GlobalMaxPool", [_node("GlobalMaxPool", ["x"])], {"x": x},
        formula=lambda f, run: max_pool(f["x"], 9, 1, 0))
    add("AveragePool", [_node("AveragePool", ["x"], **pool)], {"x": xa})
    add("GlobalAveragePool", [_node("GlobalAveragePool", ["x"])], {"x": xa})
    lrn = {"size": 5, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}
    add("LRN", [_node("LRN", ["x"], **lrn)], {"x": x}, formula=lambda f, run: lrn_formula(f["x"], **lrn))
    add("BatchNormalization", [_node("BatchNormalization", ["x", "s", "t", "m", "v"])], {"x": x}, bn)
    add("LayerNormalization", [_node("LayerNormalization", ["x", "g", "b"], axis=-1)], {"x": x},
        {"g": rng.standard_normal(9), "b": rng.standard_normal(9)})
    add("Softmax", [_node("Softmax", ["x"], axis=-1)], {"x": x})
    add("LogSoftmax", [_node("LogSoftmax", ["x"], axis=-1)], {"x": x})
    add("Concat", [_node("Concat", ["x", "x2"], axis=1)], {"x": x, "x2": x2})
    add("Conv", [_node("Conv", ["x", "w"], pads=[1, 1, 1, 1])], {"x": xa}, {"w": w})
    add("Conv-depthwise", [_node("Conv", ["x", "w"], pads=[1, 1, 1, 1], group=c)], {"x": xa},
        {"w": w[:, :1]})
    a = special_array((8, 32), rng, SPECIAL_ACCUMULATING)
    b = rng.standard_normal((32, 16))
    add("MatMul", [_node("MatMul", ["a", "b"])], {"a": a}, {"b": b})
    add("Gemm", [_node("Gemm", ["a", "b", "bias"])], {"a": a}, {"b": b, "bias": rng.standard_normal(16)})
    # the chains backends fuse: an activation after a convolution, a matrix product, a binary
    # op, a normalization; MobileNet's ReLU6 (Clip) after a depthwise convolution
    conv = _node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1])
    add("Conv+Relu", [conv, _node("Relu", ["c"])], {"x": xa}, {"w": w})
    add("Conv+Clip", [conv, _node("Clip", ["c", "lo", "hi"])], {"x": xa}, {"w": w, "lo": lo, "hi": hi})
    add("Conv64+Relu", [conv, _node("Relu", ["c"])], {"x": xa}, {"w": w64})
    add("Conv-depthwise+Clip", [_node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1], group=c),
                                _node("Clip", ["c", "lo", "hi"])], {"x": xa},
        {"w": w[:, :1], "lo": lo, "hi": hi})
    add("Conv+HardSigmoid", [conv, _node("HardSigmoid", ["c"])], {"x": xa}, {"w": w})
    add("Conv+BatchNormalization+Relu",
        [conv, _node("BatchNormalization", ["c", "s", "t", "m", "v"], "n"), _node("Relu", ["n"])],
        {"x": xa}, {"w": w, **bn})
    add("Conv+Add+Relu", [conv, _node("Add", ["c", "r"], "s"), _node("Relu", ["s"])],
        {"x": xa, "r": special_array(x.shape, rng, SPECIAL_ACCUMULATING)}, {"w": w})
    conv_relu = model([conv, _node("Relu", ["c"])], {"x": xa}, {"w": w})
    add("Conv+Relu+MaxPool", [conv, _node("Relu", ["c"], "r"), _node("MaxPool", ["r"], "y", **pool)],
        {"x": xa}, {"w": w}, formula=lambda f, run: max_pool(run(conv_relu, f)[0], 3, 1, 1))
    add("MatMul+Relu", [_node("MatMul", ["a", "b"], "p"), _node("Relu", ["p"])], {"a": a}, {"b": b})
    add("Add+Clip", [_node("Add", ["x", "x2"], "s"), _node("Clip", ["s", "lo", "hi"])],
        {"x": x, "x2": x2}, {"lo": lo, "hi": hi})
    # the exported exact GELU, x * 0.5 * (1 + Erf(x / sqrt 2)), after the ops backends fuse it into
    gelu = [_node("Div", ["p", "sqrt2"], "gd"), _node("Erf", ["gd"], "ge"), _node("Add", ["ge", "one"], "ga"),
            _node("Mul", ["p", "ga"], "gm"), _node("Mul", ["gm", "half"], "y")]
    gk = {"sqrt2": np.float32(np.sqrt(2)), "one": np.float32(1), "half": np.float32(0.5)}
    add("MatMul+Gelu", [_node("MatMul", ["a", "b"], "p")] + gelu, {"a": a}, {"b": b, **gk})
    add("Add+Gelu", [_node("Add", ["x", "x2"], "p")] + gelu, {"x": x, "x2": x2}, gk)
    add("Conv+Gelu", [_node("Conv", ["x", "w"], "p", pads=[1, 1, 1, 1])] + gelu, {"x": xa}, {"w": w, **gk})
    # finite inputs near float32's limit through convolutions shaped for Winograd (3x3, stride 1,
    # 64 channels, 12x12): its transforms add inputs up before the products, the direct sum not
    # (one such value per 3x3 window, so that no sum's order decides whether it overflows)
    xw = (rng.standard_normal((1, 64, 12, 12)) * 3).astype(np.float32)
    for k, (i, j) in enumerate(((1, 1), (1, 6), (1, 10), (6, 2), (6, 7), (10, 10))):
        xw[0, rng.integers(64), i, j] = 3e38 if k % 2 else -3e38
    ww = (rng.standard_normal((64, 64, 3, 3)) * 0.3).astype(np.float32)
    conv64 = _node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1])
    add("Conv64-near-max", [_node("Conv", ["x", "w"], "y", pads=[1, 1, 1, 1])], {"x": xw}, {"w": ww})
    add("Conv64-near-max+Relu", [conv64, _node("Relu", ["c"])], {"x": xw}, {"w": ww})
    # finite inputs whose squares overflow: inf - inf makes a NaN inside the graph, +-inf where
    # only one square overflows, before each op that could turn a NaN into a number
    fx, fx2 = overflowing_pair((2, 16, 9, 9), rng)
    diff = [_node("Mul", ["x", "x"], "xx"), _node("Mul", ["x2", "x2"], "yy"), _node("Sub", ["xx", "yy"], "d")]
    made = model(diff[:2] + [_node("Sub", ["xx", "yy"], "y")], {"x": fx, "x2": fx2}, {})
    inside = {"x": fx, "x2": fx2}
    add("made-inside+Relu", diff + [_node("Relu", ["d"])], inside)
    add("made-inside+Clip", diff + [_node("Clip", ["d", "lo", "hi"])], inside, {"lo": lo, "hi": hi})
    add("made-inside+Conv+Relu", diff + [_node("Conv", ["d", "w"], "c", pads=[1, 1, 1, 1]), _node("Relu", ["c"])],
        inside, {"w": w})
    add("made-inside+MaxPool", diff + [_node("MaxPool", ["d"], "y", **pool)], inside,
        formula=lambda f, run: max_pool(run(made, f)[0], 3, 1, 1))
    add("made-inside+LRN", diff + [_node("LRN", ["d"], **lrn)], inside,
        formula=lambda f, run: lrn_formula(run(made, f)[0], **lrn))
    return out


def overflowing_pair(shape, rng) -> tuple[np.ndarray, np.ndarray]:
    """Two finite arrays, standard normal times 3, holding 1e20 or -1e20 (whose square
    overflows float32) at some places in both, in the first only, and in the second only."""
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x2 = (rng.standard_normal(shape) * 3).astype(np.float32)
    idx = rng.choice(x.size, 30, replace=False)
    sign = rng.choice(np.float32([-1, 1]), 30)
    x.reshape(-1)[idx[:20]] = 1e20 * sign[:20]
    x2.reshape(-1)[idx[:10]] = 1e20 * sign[10:20]
    x2.reshape(-1)[idx[20:]] = 1e20 * sign[20:]
    return x, x2


def nan_beside_inf() -> np.ndarray:
    """[1, 2, 4, 8]: 2x2 windows holding a NaN beside +inf, -inf or numbers at each tap, of only
    -inf, of only NaN, and without a NaN. onnxruntime 1.32 (x86-64, its 2-D vector kernel here)
    gives NaN for 4 of the 12 windows holding one, and +inf, -inf or a number for the others,
    as the NaN's tap decides; the formula gives NaN for all 12."""
    nan, inf = np.nan, np.inf
    windows = [[nan, inf, 1, 2], [inf, nan, 1, 2], [1, 2, nan, inf], [2, inf, 1, nan],
               [-inf, -inf, -inf, -inf], [nan, -inf, -inf, -inf], [-inf, -inf, -inf, nan],
               [nan, nan, nan, nan], [3, -inf, 1, 2], [nan, 5, -1, -inf], [0, -0.0, nan, 0],
               [inf, -inf, 1, 1], [nan, 1e30, -1e30, 7], [-2, -1, nan, -3], [inf, inf, nan, inf],
               [-1, -2, -3, -4]]
    x = np.empty((1, 2, 4, 8), np.float32)
    for k, w in enumerate(windows):
        c, i, j = k // 8, (k % 8) // 4 * 2, (k % 4) * 2
        x[0, c, i:i + 2, j:j + 2] = np.reshape(w, (2, 2))
    return x


def max_pool(x: np.ndarray, k: int, stride: int, pad: int) -> np.ndarray:
    """2-D max pooling of NCHW x (square window, stride, zero-free padding) in which a window
    holding a NaN gives NaN."""
    n, c, h, w = x.shape
    p = np.full((n, c, h + 2 * pad, w + 2 * pad), -np.inf, np.float32)
    p[:, :, pad:pad + h, pad:pad + w] = x
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    y = np.empty((n, c, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            win = p[:, :, i * stride:i * stride + k, j * stride:j * stride + k]
            y[:, :, i, j] = win.max(axis=(2, 3))  # numpy's max propagates NaN
    return y


def hardmax(x: np.ndarray) -> np.ndarray:
    """Hardmax over the last axis: 1 at numpy's argmax (the first NaN, when a row holds one;
    onnxruntime's row then has no 1 at all)."""
    y = np.zeros_like(x)
    np.put_along_axis(y, np.argmax(x, axis=-1)[..., None], 1.0, axis=-1)
    return y


def lrn_formula(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """LRN as ONNX defines it, in float32: x / (bias + alpha / size * square_sum) ** beta, the
    sum over the channel window of each element."""
    c = x.shape[1]
    lo_half, hi_half = (size - 1) // 2, size - 1 - (size - 1) // 2
    with np.errstate(all="ignore"):  # squares past float32's range are inf, as in the kernels
        sq = np.square(x, dtype=np.float32)
        s = np.zeros_like(x)
        for ch in range(c):
            s[:, ch] = sq[:, max(0, ch - lo_half):min(c, ch + hi_half + 1)].sum(axis=1, dtype=np.float32)
        return (x / (np.float32(bias) + np.float32(alpha / size) * s) ** np.float32(beta)).astype(np.float32)


def assert_nonfinite_match(got: np.ndarray, want: np.ndarray, what: str, rtol: float = 1e-4):
    """The same NaN positions, the same infinities (with their signs), finite values within
    rtol of each other (relative to 1 + |want|)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    gn, wn = np.isnan(got), np.isnan(want)
    assert (gn == wn).all(), (f"{what}: NaN at {int(wn.sum())} places expected, {int(gn.sum())} got, "
                              f"{int((gn != wn).sum())} differ (first {np.argwhere(gn != wn)[:3].tolist()})")
    gi, wi = np.isinf(got), np.isinf(want)
    assert (gi == wi).all() and (np.sign(got[wi]) == np.sign(want[wi])).all(), f"{what}: infinities differ"
    fin = np.isfinite(want)
    err = np.abs(got[fin].astype(np.float64) - want[fin]) / (1.0 + np.abs(want[fin].astype(np.float64)))
    assert err.size == 0 or err.max() <= rtol, f"{what}: finite values differ by {err.max():.3g} (relative)"
