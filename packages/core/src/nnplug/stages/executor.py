"""The run stage: a network's plan (:mod:`nnplug.plan`) run over the feeds.

Values cross devices only between steps; every value is dropped after its last use so its
memory can be reused.
"""

from __future__ import annotations

import time

import numpy as np

from ..device import CPU, Device
from ..errors import BackendError, InputError, NnplugError
from ..graph import ValueInfo
from ..plan import Plan, Step, plan_frees  # noqa: F401 - the plan's types, where they were
from ..runcontext import current
from ..shapecheck import bind_symbols, mismatch
from ..tensor import Tensor


def run_steps(steps: list[Step], env: dict[str, Tensor]) -> dict[str, Tensor]:
    """Run ``steps`` over ``env`` (value name -> Tensor); returns env with the results."""
    copies: dict[tuple[str, Device], Tensor] = {}
    ctx = current()  # a profiler or terminate flag of this run (see nnplug.runcontext)
    prof = ctx.profiler if ctx is not None else None
    for s in steps:
        if ctx is not None:
            ctx.check(f"node {s.nodes[0]!r} ({s.label})")
        ins = []
        for x in s.inputs:
            t = env[x]
            if t.device != s.device:  # a partition boundary: the only place data moves
                key = (x, s.device)
                c = copies.get(key)
                if c is None:
                    t0 = time.perf_counter_ns()
                    c = copies[key] = t.to(s.device, None if s.device == CPU else s.api)
                    if prof is not None:
                        prof.copy(x, t, c, t0, time.perf_counter_ns())
                t = c
            ins.append(t)
        if ctx is not None:
            ctx.kernels = 0
            t0 = time.perf_counter_ns()
        try:
            outs = s.run(ins)
        except NnplugError:
            raise
        except Exception as e:
            raise step_failed(s, e) from e
        if len(outs) != len(s.outputs):
            raise BackendError(
                f"{s.label} returned {len(outs)} output(s) for node(s) {', '.join(s.nodes[:3])}, "
                f"expected {len(s.outputs)}"
            )
        if s.values:
            check_outputs(s, ins, outs)
        if prof is not None and ctx.kernels == 0:  # the backend timed no kernels itself
            prof.step(s, ins, outs, t0, time.perf_counter_ns())
        for name, t in zip(s.outputs, outs):
            env[name] = t
        for name in s.frees:
            env.pop(name, None)
            for key in [k for k in copies if k[0] == name]:
                del copies[key]
    return env


def step_failed(s: Step, e: Exception) -> BackendError:
    """The error of a step whose run raised something other than an nnplug error."""
    return BackendError(f"{s.label} failed running node(s) {', '.join(s.nodes[:3])}"
                        f"{' ...' if len(s.nodes) > 3 else ''}: {type(e).__name__}: {e}")


def check_outputs(s: Step, ins: list[Tensor], outs: list[Tensor]) -> None:
    """A plugin's outputs must have the shapes and dtypes the model says (symbolic dims as
    bound by this step's inputs)."""
    expected = s.static_outputs
    if expected is not None and all(
            t.shape == shape and t.dtype == dtype for t, (shape, dtype) in zip(outs, expected)):
        return  # the common case; anything else gets the full check and its message
    symbols: dict[str, int] = {}
    for name, t in zip(s.inputs, ins):
        bind_symbols(s.values.get(name), t.shape, symbols)
    for name, t in zip(s.outputs, outs):
        why = mismatch(t.shape, t.dtype, s.values.get(name), symbols)
        if why:
            raise BackendError(
                f"{s.label} returned output {name!r} of node(s) {', '.join(s.nodes[:3])}"
                f"{' ...' if len(s.nodes) > 3 else ''} with {why}; the plugin computes "
                f"another shape than the model's (report it to the plugin's authors)")


def check_feeds(feeds, inputs: list[ValueInfo] | dict[str, ValueInfo]) -> dict[str, Tensor]:
    """Validate user feeds by name, dtype and shape (binding symbolic dims). ``inputs``: the
    model's inputs, or :func:`input_table` of them (built once, for repeated runs)."""
    if not isinstance(feeds, dict):
        raise InputError(f"run() takes a dict of input name -> array, not {type(feeds).__name__}")
    expected = inputs if isinstance(inputs, dict) else input_table(inputs)
    if feeds.keys() != expected.keys():
        unknown = [k for k in feeds if k not in expected]
        if unknown:
            raise InputError(
                f"unknown input(s) {', '.join(map(repr, unknown))}; the model's inputs are: "
                f"{', '.join(expected) or 'none'}"
            )
        missing = [k for k in expected if k not in feeds]
        raise InputError(f"missing input(s): {', '.join(map(repr, missing))}")
    bound: dict[str, tuple[int, str]] = {}
    out = {}
    for name, value in feeds.items():
        info = expected[name]
        if (type(value) is np.ndarray and info.kind == "tensor" and info.is_static
                and value.dtype == info.dtype and value.shape == info.shape
                and value.dtype != object and value.flags.c_contiguous):
            out[name] = Tensor.from_numpy(value)  # the common case: nothing to bind or report
            continue
        if info.kind != "tensor" and not isinstance(value, (Tensor, np.ndarray, np.generic)):
            out[name] = _non_tensor(name, value, info)
            continue
        if info.kind == "sequence":
            raise InputError(f"input {name!r} is a sequence: give a list of arrays")
        if isinstance(value, (list, tuple)) and info.dtype is not None:
            value = _list_as_array(name, value, info.dtype)
        t = value if isinstance(value, Tensor) else _as_tensor(name, value)
        if info.dtype is not None and t.dtype != info.dtype:
            raise InputError(
                f"input {name!r} has dtype {t.dtype}, the model expects {info.dtype}; "
                f"convert it with .astype(np.{info.dtype.name})"
            )
        if info.shape is not None:
            if len(t.shape) != len(info.shape):
                raise InputError(
                    f"input {name!r} has shape {t.shape} (rank {len(t.shape)}), the model "
                    f"expects rank {len(info.shape)}: {_fmt(info.shape)}"
                )
            for axis, (got, want) in enumerate(zip(t.shape, info.shape)):
                if isinstance(want, int) and got != want:
                    raise InputError(
                        f"input {name!r} has shape {t.shape}, the model expects "
                        f"{_fmt(info.shape)} (dimension {axis} must be {want})"
                    )
                if isinstance(want, str):
                    if want in bound and bound[want][0] != got:
                        other = bound[want][1]
                        raise InputError(
                            f"input {name!r} dimension {axis} ({want!r}) is {got}, but {want!r} "
                            f"is {bound[want][0]} in input {other!r}"
                        )
                    bound[want] = (got, name)
        out[name] = t
    return out


def input_table(inputs: list[ValueInfo]) -> dict[str, ValueInfo]:
    """The model's inputs by name, in order: what :func:`check_feeds` checks feeds against."""
    return {v.name: v for v in inputs}


def _non_tensor(name: str, value, info: ValueInfo):
    """A sequence (list of arrays) or optional (None when empty) input."""
    from ..values import TensorSequence, from_host

    if value is None and info.kind not in ("optional", "unknown"):
        raise InputError(f"input {name!r} is a {info.kind}, not an optional: None is no value")
    if isinstance(value, (list, tuple)):
        if info.kind == "optional" or info.kind == "sequence" or info.kind == "unknown":
            return TensorSequence([_as_tensor(f"{name}[{k}]", v) for k, v in enumerate(value)])
    if isinstance(value, TensorSequence) or value is None:
        return from_host(value)
    raise InputError(f"input {name!r} is a {info.kind}; give a list of arrays (sequence) or "
                     f"an array or None (optional), not {type(value).__name__}")


def _list_as_array(name: str, value, dtype: np.dtype) -> np.ndarray:
    """Nested Python lists take the model's dtype, as in onnxruntime (numpy alone would make
    ``[[1.0, 2.0]]`` float64 for a float input)."""
    try:
        return np.asarray(value, dtype=dtype)
    except (TypeError, ValueError) as e:
        raise InputError(f"input {name!r}: the list cannot be converted to a {dtype} array "
                         f"(the model's type): {e}") from None


def _as_tensor(name: str, value) -> Tensor:
    if hasattr(value, "__dlpack__") and not isinstance(value, np.ndarray):
        from ..tensor import from_dlpack

        try:
            return from_dlpack(value)
        except (BufferError, TypeError) as e:
            raise InputError(f"input {name!r}: {e}") from None
    try:
        arr = np.asarray(value)
    except Exception as e:
        raise InputError(f"input {name!r} cannot be converted to an array: {e}") from None
    if arr.dtype.kind == "V" and arr.dtype.fields is None:  # raw bytes (np.void): strings
        arr = arr.view(f"S{arr.dtype.itemsize}") if arr.dtype.itemsize else arr.astype("S1")
    if arr.dtype.kind == "S":  # bytes are UTF-8 text, as onnxruntime reads them
        try:
            arr = np.char.decode(arr, "utf-8")
        except UnicodeDecodeError as e:
            raise InputError(f"input {name!r}: a string is not UTF-8 text: {e}") from None
    if arr.dtype.kind == "U":  # ONNX strings: object arrays of str, as onnxruntime returns
        arr = arr.astype(object)
    if arr.dtype == object and not all(isinstance(v, (str, bytes)) for v in arr.flat):
        raise InputError(f"input {name!r} is neither a numeric array nor an array of strings")
    try:
        return Tensor.from_numpy(arr)
    except MemoryError:
        # a strided view (e.g. broadcast_to, zero strides) is copied to contiguous memory first
        raise InputError(
            f"input {name!r}: shape {arr.shape} {arr.dtype} needs {arr.nbytes:,} bytes of "
            f"contiguous memory, more than can be allocated; feed a smaller array (a strided or "
            f"broadcast view is copied to its full size)") from None


def _fmt(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
