"""Edge values and empty tensors for the conformance suite (``test_edge_values.py``): one small
model per op, fed the values where kernels go wrong and random inputs rarely land: 0 and -0.0,
+-inf, NaN, the ties of rounding (x.5), the bounds of Clip (exactly min and max), the
thresholds of HardSigmoid, HardSwish, Shrink and ThresholdedRelu, a denormal and float32's
largest values; binary ops get every pair of them. Each model's first axis is symbolic, and a
second data set feeds it 0 rows (an empty tensor), which a backend that claims the node must
run too. A few cases empty another axis: a Concat of an empty input (a KV cache's first step),
a MatMul over an empty inner dimension, a Softmax over an empty axis.

The expected answer is onnxruntime's (CPU provider), else, where onnxruntime is not installed
or fails on the case, ``onnx.reference``'s. Where onnxruntime's answer depends on its kernel
rather than on the op, a NumPy formula replaces it (see nnplug_conformance.nonfinite): ReduceMax,
ReduceMin and MaxPool give NaN for a window holding one. Signs of zeros are not compared (a
correct Relu may give -0.0 or 0.0 for -0.0); NaN positions, infinities and their signs are.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .nonfinite import max_pool

F32_MAX = float(np.finfo(np.float32).max)
# every edge value once; those that add up values of either sign leave out float32's largest
# (whose sums overflow or not depending on the order of a correct kernel)
EDGE = (0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0,
        6.0, -6.0, 0.49999997, 1e-40, -1e-40, F32_MAX, -F32_MAX)
EDGE_ACCUMULATING = tuple(v for v in EDGE if abs(v) != F32_MAX)


def edge_row(values=EDGE) -> np.ndarray:
    return np.array(values, np.float32)


def edge_rows(values=EDGE) -> np.ndarray:
    """[2, N]: the values, then the same reversed."""
    r = edge_row(values)
    return np.stack([r, r[::-1]])


def edge_grid(values=EDGE) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of values: a[i, j] = values[i], b[i, j] = values[j]."""
    r = edge_row(values)
    return np.repeat(r[:, None], r.size, 1), np.repeat(r[None, :], r.size, 0)


@dataclass
class EdgeCase:
    name: str
    model: onnx.ModelProto = field(repr=False)
    datasets: dict = field(repr=False)  # label -> feeds
    formula: object = None  # feeds -> expected first output, where it replaces onnxruntime's

    @property
    def op_types(self) -> list[str]:
        return sorted({n.op_type for n in self.model.graph.node})


def _model(nodes, feeds: dict, inits: dict, symbolic: dict, opset: int) -> onnx.ModelProto:
    """Inputs typed from ``feeds``, axis ``symbolic[name]`` (default 0) of each a named symbolic
    dim; outputs the last node's, typed by shape inference."""
    gin = []
    for k, v in feeds.items():
        shape = list(v.shape)
        for axis in _axes(symbolic.get(k, 0)):
            shape[axis] = f"{k}_{axis}"
        gin.append(helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), shape))
    ini = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    ops = [helper.make_opsetid("", opset)]
    probe = helper.make_model(helper.make_graph(nodes, "g", gin, [], ini), opset_imports=ops)
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    outs = [inferred[o] for o in nodes[-1].output]
    m = helper.make_model(helper.make_graph(nodes, "edge", gin, outs, ini), opset_imports=ops)
    m.ir_version = min(m.ir_version, 9)  # older onnxruntime builds read no newer IR
    return m


def _axes(spec) -> tuple:
    return () if spec is None else (spec,) if isinstance(spec, int) else tuple(spec)


def _empty(feeds: dict, symbolic: dict) -> dict:
    """The feeds with their first symbolic axis emptied."""
    out = {}
    for k, v in feeds.items():
        axes = _axes(symbolic.get(k, 0))
        out[k] = np.take(v, np.arange(0), axis=axes[0]) if axes else v
    return out


UNARY = ("Relu", "Sigmoid", "Tanh", "Elu", "Selu", "Celu", "Softplus", "Softsign", "Abs", "Neg",
         "Sign", "Sqrt", "Exp", "Log", "Reciprocal", "Floor", "Ceil", "Round", "Erf", "Sin", "Cos",
         "Atan", "Sinh", "Asinh", "Mish", "HardSwish", "IsNaN", "IsInf", "Identity")
BINARY = ("Add", "Sub", "Mul", "Div", "Max", "Min", "Pow", "Equal", "Less", "Greater")


def cases() -> list[EdgeCase]:
    out: list[EdgeCase] = []

    def add(name, nodes, feeds, inits=None, symbolic=None, opset=18, formula=None, extra=None):
        symbolic = symbolic or {}
        sets = {"edge values": feeds, "empty": _empty(feeds, symbolic)}
        sets.update(extra or {})
        out.append(EdgeCase(name, _model(nodes, feeds, inits or {}, symbolic, opset), sets, formula))

    def node(op, ins, out="y", **attrs):
        return helper.make_node(op, ins, [out], name=out, **attrs)

    x = edge_rows()
    for op in UNARY:
        add(op, [node(op, ["x"])], {"x": x})
    add("Gelu", [node("Gelu", ["x"])], {"x": x}, opset=20)
    add("Gelu-tanh", [node("Gelu", ["x"], approximate="tanh")], {"x": x}, opset=20)
    add("LeakyRelu", [node("LeakyRelu", ["x"], alpha=0.1)], {"x": x})
    add("HardSigmoid", [node("HardSigmoid", ["x"], alpha=0.2, beta=0.5)], {"x": x})  # 0 at -2.5, 1 at 2.5
    add("Shrink", [node("Shrink", ["x"], lambd=0.5, bias=1.5)], {"x": x})  # +-0.5: inside
    add("ThresholdedRelu", [node("ThresholdedRelu", ["x"], alpha=1.0)], {"x": x})  # 1: below
    add("Clip", [node("Clip", ["x", "lo", "hi"])], {"x": x},
        {"lo": np.float32(-1), "hi": np.float32(1)})  # exactly -1 and 1 among the inputs
    add("Clip-relu6", [node("Clip", ["x", "lo", "hi"])], {"x": x},
        {"lo": np.float32(0), "hi": np.float32(6)})
    # ONNX: an omitted max is the type's largest value, so +inf comes out as 3.4e38 (as
    # onnxruntime gives it; onnx.reference leaves it inf, so the spec's formula decides)
    add("Clip-min-only", [node("Clip", ["x", "lo"])], {"x": x}, {"lo": np.float32(-0.5)},
        formula=lambda fd: np.clip(fd["x"], np.float32(-0.5), np.finfo(np.float32).max))
    add("Clip-min-equals-max", [node("Clip", ["x", "lo", "hi"])], {"x": x},
        {"lo": np.float32(1.5), "hi": np.float32(1.5)})
    a, b = edge_grid()
    for op in BINARY:
        add(op, [node(op, ["a", "b"])], {"a": a, "b": b})
    add("Mod-fmod", [node("Mod", ["a", "b"], fmod=1)], {"a": a, "b": b})
    add("PRelu", [node("PRelu", ["a", "slope"])], {"a": a}, {"slope": np.float32([0.1] * a.shape[1])})
    add("Add-broadcast", [node("Add", ["a", "k"])], {"a": a}, {"k": edge_row()})
    xa = edge_rows(EDGE_ACCUMULATING)
    axes = np.array([1], np.int64)
    for op in ("ReduceSum", "ReduceMean", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceProd",
               "ReduceLogSumExp"):
        add(op, [node(op, ["x", "axes"])], {"x": xa}, {"axes": axes})
    for op, f in (("ReduceMax", np.max), ("ReduceMin", np.min)):  # numpy's propagate NaN
        add(op, [node(op, ["x", "axes"])], {"x": x}, {"axes": axes},
            formula=lambda fd, f=f: f(fd["x"], axis=1, keepdims=True))
    for op in ("Softmax", "LogSoftmax"):
        add(op, [node(op, ["x"], axis=-1)], {"x": x}, symbolic={"x": (0, 1)},
            extra={"empty axis": {"x": np.zeros((2, 0), np.float32)}})
    # pooling, convolution and products over images and matrices holding the edge values
    img = np.resize(edge_row(EDGE_ACCUMULATING), (2, 3, 5, 5)).astype(np.float32)
    add("MaxPool", [node("MaxPool", ["x"], kernel_shape=[2, 2])], {"x": np.resize(edge_row(), (2, 3, 5, 5))},
        formula=lambda fd: max_pool(fd["x"], 2, 1, 0))
    add("AveragePool", [node("AveragePool", ["x"], kernel_shape=[2, 2])], {"x": img})
    add("GlobalAveragePool", [node("GlobalAveragePool", ["x"])], {"x": img})
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    add("Conv", [node("Conv", ["x", "w"], pads=[1, 1, 1, 1])], {"x": img}, {"w": w})
    add("Conv+Relu", [node("Conv", ["x", "w"], "c", pads=[1, 1, 1, 1]), node("Relu", ["c"])], {"x": img}, {"w": w})
    m = np.resize(edge_row(EDGE_ACCUMULATING), (4, 6)).astype(np.float32)
    wm = rng.standard_normal((6, 5)).astype(np.float32)
    add("MatMul", [node("MatMul", ["m", "wm"])], {"m": m}, {"wm": wm})
    add("Gemm", [node("Gemm", ["m", "wm", "bias"])], {"m": m}, {"wm": wm, "bias": rng.standard_normal(5).astype(np.float32)})
    add("BatchNormalization", [node("BatchNormalization", ["x", "s", "t", "mu", "var"])], {"x": img},
        {k: rng.uniform(0.5, 2, 3).astype(np.float32) for k in ("s", "t", "mu", "var")})
    add("LayerNormalization", [node("LayerNormalization", ["m", "g", "bb"], axis=-1)], {"m": m},
        {"g": np.ones(6, np.float32), "bb": np.zeros(6, np.float32)})
    # empty tensors along other axes: the inner dimension of a product, a Concat's input
    add("MatMul-empty-inner", [node("MatMul", ["p", "q"])],
        {"p": np.ones((3, 2), np.float32), "q": np.ones((2, 4), np.float32)}, symbolic={"p": 1, "q": 0})
    add("Concat", [node("Concat", ["c0", "c1"], axis=1)], {"c0": x, "c1": x},
        extra={"one input empty": {"c0": np.zeros((2, 0), np.float32), "c1": x},
               "both empty": {"c0": np.zeros((2, 0), np.float32), "c1": np.zeros((2, 0), np.float32)}},
        symbolic={"c0": 1, "c1": 1})
    add("Transpose", [node("Transpose", ["x"], perm=[1, 0])], {"x": x})
    return out


def expected(case: EdgeCase, feeds: dict) -> list[np.ndarray]:
    """The answer for one data set: the case's formula (first output), else onnxruntime's, else
    (onnxruntime missing or failing) onnx.reference's. Raises when no reference runs it."""
    if case.formula is not None:
        return [np.asarray(case.formula(feeds))]
    try:
        import onnxruntime as ort
    except ImportError:
        ort = None
    if ort is not None:
        so = ort.SessionOptions()
        so.log_severity_level = 4
        try:
            sess = ort.InferenceSession(case.model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return sess.run(None, feeds)
        except Exception:  # noqa: BLE001 - then onnx.reference decides
            pass
    from onnx.reference import ReferenceEvaluator

    with np.errstate(all="ignore"):
        return [np.asarray(r) for r in ReferenceEvaluator(case.model).run(None, feeds)]


def mismatch(case: EdgeCase, label: str, feeds: dict, name: str, got, want, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want`` (NaN where it is NaN, the same infinities, finite values
    within rtol/atol), else the first few differing elements, each with the inputs it came from
    where the output has the inputs' shape."""
    got, want = np.asarray(got), np.asarray(want)
    where = f"{case.name}, {label}: output {name!r}"
    if got.shape != want.shape:
        return f"{where}: shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"{where}: dtype {got.dtype}, expected {want.dtype}"
    if want.dtype.kind != "f":
        bad = got != want
    else:
        g, w = got.astype(np.float64), want.astype(np.float64)
        with np.errstate(invalid="ignore"):
            bad = (np.isnan(g) != np.isnan(w)) | ~np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
    if not bad.any():
        return None
    shown = []
    for idx in np.argwhere(bad)[:4]:
        idx = tuple(int(i) for i in idx)
        ins = ", ".join(f"{k}={v[idx]!r}" for k, v in feeds.items() if v.shape == got.shape)
        shown.append(f"at {idx}{' (' + ins + ')' if ins else ''}: got {got[idx]!r}, expected {want[idx]!r}")
    return f"{where}: {int(bad.sum())} of {want.size} values differ; " + "; ".join(shown)
