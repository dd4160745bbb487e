"""ONNX's own backend node tests, as (model, inputs, expected outputs) cases.

Read from the installed ``onnx`` package: ``onnx/backend/test/data/node/*/`` (``model.onnx``
and ``test_data_set_*/{input,output}_*.pb``) where the wheel ships them, else generated in
memory from ``onnx.backend.test.case.node`` (the same cases those files are written from).
"""

from __future__ import annotations

import glob
import os
import warnings
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

# (rtol, atol) per op type for float outputs; ONNX's own per-case tolerances are a floor.
DEFAULT_TOLERANCE = (1e-3, 1e-5)
TOLERANCES: dict[str, tuple[float, float]] = {
    # accumulations whose order legitimately differs between implementations
    "Conv": (1e-3, 1e-4), "ConvTranspose": (1e-3, 1e-4), "Gemm": (1e-3, 1e-4),
    "MatMul": (1e-3, 1e-4), "Einsum": (1e-3, 1e-4), "ReduceSum": (1e-3, 1e-4),
    "ReduceMean": (1e-3, 1e-4), "ReduceSumSquare": (1e-3, 1e-4), "ReduceL2": (1e-3, 1e-4),
    "ReduceLogSumExp": (1e-3, 1e-4), "AveragePool": (1e-3, 1e-4), "LpPool": (1e-3, 1e-4),
    "GlobalAveragePool": (1e-3, 1e-4), "LayerNormalization": (1e-3, 1e-4),
    "BatchNormalization": (1e-3, 1e-4), "InstanceNormalization": (1e-3, 1e-4),
    "GroupNormalization": (1e-3, 1e-4), "LRN": (1e-3, 1e-4), "Sum": (1e-3, 1e-4),
    "Mean": (1e-3, 1e-4),
    # transcendental functions computed with different approximations
    "Erf": (1e-3, 1e-5), "Gelu": (1e-3, 1e-5), "Exp": (1e-3, 1e-5), "Log": (1e-3, 1e-5),
    "Pow": (1e-3, 1e-5), "Softmax": (1e-3, 1e-6), "LogSoftmax": (1e-3, 1e-5),
    "Tanh": (1e-3, 1e-6), "Sigmoid": (1e-3, 1e-6), "HardSwish": (1e-3, 1e-6),
}


def tolerance(op_types, case_rtol: float = 0.0, case_atol: float = 0.0,
              overrides: dict | None = None) -> tuple[float, float]:
    """The loosest tolerance of the ops involved, never tighter than the case's own."""
    rtol, atol = case_rtol, case_atol
    for op in op_types:
        r, a = (overrides or {}).get(op) or TOLERANCES.get(op, DEFAULT_TOLERANCE)
        rtol, atol = max(rtol, r), max(atol, a)
    return rtol, atol


@dataclass
class NodeCase:
    name: str
    model: onnx.ModelProto | None = field(repr=False, default=None)
    model_path: str | None = None
    data_sets: list | None = field(repr=False, default=None)
    data_dirs: list[str] = field(default_factory=list)
    rtol: float = 0.0
    atol: float = 0.0

    def load_model(self) -> onnx.ModelProto:
        if self.model is None:
            self.model = onnx.load(self.model_path)
        return self.model

    @property
    def op_types(self) -> list[str]:
        return sorted({n.op_type for n in self.load_model().graph.node})

    @property
    def expanded(self) -> bool:
        return "_expanded" in self.name

    def datasets(self):
        """Yields (inputs, outputs) lists; values that are not tensors come as None."""
        if self.data_sets is not None:
            for ins, outs in self.data_sets:
                yield [_as_array(x) for x in ins], [_as_array(x) for x in outs]
            return
        for d in self.data_dirs:
            yield (_read_pbs(sorted(glob.glob(os.path.join(d, "input_*.pb")), key=_pb_index)),
                   _read_pbs(sorted(glob.glob(os.path.join(d, "output_*.pb")), key=_pb_index)))


def _pb_index(path: str) -> int:
    return int(os.path.basename(path).split("_")[1].split(".")[0])


def _as_array(x):
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, np.generic):  # a 0-d tensor given as a numpy scalar
        return np.asarray(x)
    if isinstance(x, onnx.TensorProto):  # types numpy lacks (float8, int4, ...)
        try:
            return numpy_helper.to_array(x)
        except Exception:
            return None
    return None  # a sequence, map or optional value


def _read_pbs(paths):
    out = []
    for p in paths:
        t = onnx.TensorProto()
        with open(p, "rb") as f:
            data = f.read()
        try:
            t.ParseFromString(data)
            out.append(numpy_helper.to_array(t) if t.data_type else None)
        except Exception:  # a sequence or optional value: not a plain tensor
            out.append(None)
    return out


def node_data_dir() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


_cache: list[NodeCase] | None = None


def collect() -> list[NodeCase]:
    """Every node test case of the installed onnx, sorted by name."""
    global _cache
    if _cache is not None:
        return _cache
    root = node_data_dir()
    cases: list[NodeCase] = []
    if os.path.isdir(root) and os.listdir(root):
        for d in sorted(os.listdir(root)):
            model = os.path.join(root, d, "model.onnx")
            if os.path.isfile(model):
                sets = sorted(glob.glob(os.path.join(root, d, "test_data_set_*")))
                cases.append(NodeCase(d, model_path=model, data_dirs=sets))
    else:
        from onnx.backend.test.case import node

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            generated = node.collect_testcases()
        seen = set()
        for c in generated:
            if c.name in seen or c.model is None:
                continue
            seen.add(c.name)
            cases.append(NodeCase(c.name, model=c.model, data_sets=list(c.data_sets or []),
                                  rtol=c.rtol, atol=c.atol))
        cases.sort(key=lambda c: c.name)
    _cache = cases
    return cases


def plain(value) -> str:
    """A value as a message shows it: 0.5, nan, -3, True, 'text' (numpy 2's repr would say
    np.float32(0.5)); a number keeps its own dtype's shortest form."""
    if isinstance(value, np.generic):
        return repr(value.item()) if value.dtype.kind in "OSU" else str(value)
    return repr(value)


def compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str | None:
    """None when ``got`` matches ``want``, else what differs (shape, dtype, values)."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"output {name!r}: shape {list(got.shape)}, expected {list(want.shape)}"
    if got.dtype != want.dtype:
        return f"output {name!r}: dtype {got.dtype}, expected {want.dtype}"
    # ml_dtypes' bfloat16 / float8 / float4 have numpy kind 'V': compare them as floats too (a
    # NaN is not equal to itself, so comparing them as raw values calls every NaN a mismatch)
    floaty = want.dtype.kind in "fc" or want.dtype.name.startswith(("bfloat16", "float8", "float4"))
    if floaty:
        g, w = got.astype(np.complex128 if want.dtype.kind == "c" else np.float64), \
            want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        nan_w, nan_g = np.isnan(w), np.isnan(g)
        bad = nan_w != nan_g
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        bad |= ~close
        if bad.any():
            idx = np.argwhere(bad)[0]
            with np.errstate(invalid="ignore"):
                diff = np.abs(g - w)
                worst = float(np.nanmax(np.where(bad, diff, 0))) if bad.any() else 0.0
            return (f"output {name!r}: {int(bad.sum())} of {w.size} values differ beyond "
                    f"rtol={rtol:g} atol={atol:g} (max abs diff {worst:.3g}); first at index "
                    f"{tuple(int(i) for i in idx)}: got {plain(got[tuple(idx)])}, expected "
                    f"{plain(want[tuple(idx)])}")
        return None
    if want.dtype.kind in "OSU":
        equal = np.array_equal(got.astype(str), want.astype(str))
    else:
        equal = np.array_equal(got, want)
    if not equal:
        bad = got != want
        idx = np.argwhere(bad)[0] if bad.ndim else ()
        return (f"output {name!r}: {int(np.sum(bad))} of {want.size} values differ; first at "
                f"index {tuple(int(i) for i in idx)}: got {plain(got[tuple(idx)])}, expected "
                f"{plain(want[tuple(idx)])}")
    return None
