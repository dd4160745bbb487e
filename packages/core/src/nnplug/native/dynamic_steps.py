"""A dynamic partition run in one native call (backend ABI 1.6, ``run_dynamic``; a string
node's partition too from ABI 1.7).

Where some shape is known only at run time, the backend itself asks each kernel's output
shapes, allocates what the partition makes and reads, runs the kernels and frees as it goes;
the host fills the inputs, hands a callback that allocates the partition's outputs (so an
IO-bound output is written in place) and reads the results. The plan (value numbering, kinds,
the shapes and symbols the model declares, which values each step frees) is built once at load;
a run copies two templates and makes one foreign call, however many kernels the partition has.
"""

from __future__ import annotations

import ctypes as C
import itertools
from operator import itemgetter

import numpy as np

from ..errors import BackendError
from ..runcontext import output_buffer
from ..shapecheck import fmt, mismatch
from . import abi, string_tensors
from .buffer import address_of, cdev

ROW = abi.MAX_NDIM


class DynamicSteps:
    """The partition's kernels as an ``nnp_dynamic_plan``: :meth:`run` takes the inputs as
    contiguous host arrays (already checked against the model)."""

    def __init__(self, runner):
        lib, spec, kernels = runner.lib, runner.spec, runner.state.kernels
        self.lib, self.spec, self.kernels = lib, spec, kernels
        self.fn = lib.table.run_dynamic
        names = list(dict.fromkeys(runner.inputs))  # the inputs first, each once
        kinds = [abi.VALUE_INPUT] * len(names)
        self.num_inputs = len(names)
        # where each of those first appears among the runner's inputs (run() takes them all)
        self._first = [runner.inputs.index(n) for n in names]
        outputs = set(runner.outputs)
        for k in kernels:
            for o in k.outputs:
                if o and o not in names:
                    names.append(o)
                    kinds.append(abi.VALUE_OUTPUT if o in outputs else abi.VALUE_TEMP)
        index = {n: i for i, n in enumerate(names)}
        self.names, self.index = names, index
        self.dtypes = [spec.dtype(n) for n in names]
        # ONNX strings (a string node's partition, ABI 1.7): packed in, copied out and released
        self._string = [string_tensors.is_string(d) for d in self.dtypes]
        nv = len(names)

        # what the model says of each value: rank and dims (symbols numbered in order)
        self.symbol_names: list[str] = []
        symbol_ids: dict[str, int] = {}
        ndims, dims = (C.c_int32 * max(nv, 1))(), (C.c_int64 * max(nv * ROW, 1))()
        values = (abi.Tensor * max(nv, 1))()
        shapes = (C.c_int64 * max(nv * ROW, 1))()
        for v, n in enumerate(names):
            info = spec.values.get(n)
            declared = None if info is None else info.shape
            ndims[v] = -1 if declared is None or len(declared) > ROW else len(declared)
            for d, w in enumerate(declared if ndims[v] >= 0 else ()):
                if isinstance(w, str):
                    if w not in symbol_ids:
                        symbol_ids[w] = len(self.symbol_names)
                        self.symbol_names.append(w)
                    dims[v * ROW + d] = -2 - symbol_ids[w]
                else:
                    dims[v * ROW + d] = w if isinstance(w, int) and w >= 0 else -1
            values[v].device = cdev(runner.dev)
            values[v].dtype = abi.dtype_of(self.dtypes[v])
            static = spec.shape(n)
            if static is not None and kinds[v] != abi.VALUE_INPUT:
                values[v].ndim = len(static)
                for d, size in enumerate(static):
                    shapes[v * ROW + d] = size
        # how this run's inputs bind the symbols: (argument of run(), axis, symbol number), the
        # first input axis that has each symbol
        binds = {}
        for i, j in enumerate(self._first):
            for d in range(max(ndims[i], 0)):
                if dims[i * ROW + d] <= -2:
                    binds.setdefault(-2 - dims[i * ROW + d], (j, d))
        self._binds = tuple((j, d, sym) for sym, (j, d) in binds.items())
        # the inputs a run describes with no more than their address and shape: (value,
        # argument of run(), start of its shape row)
        self._plain = tuple((i, j, i * ROW) for i, j in enumerate(self._first)
                            if not self._string[i] and self.dtypes[i] is not None)
        # the others: string inputs (packed) and inputs of a type the model leaves open
        self._other = tuple((i, j) for i, j in enumerate(self._first)
                            if self._string[i] or self.dtypes[i] is None)
        # the OUTPUT values whose every dim is fixed or an input's symbol: their memory is
        # preset before the call (ABI 1.8.1), saving a callback per output (~4 us each in a
        # decoder step). Per value: (index, name, dtype, start of its shape row, a getter of
        # its shape from the sizes of the bound symbols (in _binds' order) and the fixed dims)
        order = {sym: k for k, (_, _, sym) in enumerate(self._binds)}
        fixed = sorted({w for w in dims[:nv * ROW] if w >= 0})
        self._fixed_sizes = fixed
        self._presets = tuple(
            (v, n, self.dtypes[v], v * ROW, _tuple_getter(
                [order[-2 - w] if w < 0 else len(order) + fixed.index(w)
                 for w in dims[v * ROW:v * ROW + ndims[v]]]))
            for v, n in enumerate(names)
            if kinds[v] == abi.VALUE_OUTPUT and not self._string[v] and
            self.dtypes[v] is not None and ndims[v] >= 0 and all(
                w >= 0 or w <= -2 and -2 - w in order for w in dims[v * ROW:v * ROW + ndims[v]]))
        # what each value must be, for the outputs the host allocates (checked in _allocate)
        self._expect = [tuple(dims[v * ROW:v * ROW + ndims[v]]) if ndims[v] >= 0 else None
                        for v in range(nv)]
        self._values_template = bytes(values)
        self._shapes_template = bytes(shapes)
        self._values_type, self._shapes_type = type(values), type(shapes)
        self._symbols_type = C.c_int64 * max(len(self.symbol_names), 1)
        # every symbol unbound (-1): a run copies it, then binds the inputs' (an array of
        # 179 symbols built from Python ints took 24 us of a decoder step)
        self._unbound = bytes(self._symbols_type(*[-1] * max(len(self.symbol_names), 1)))

        # the steps: inputs by value index (constants and omitted ones as tensors), outputs,
        # and the TEMP values each step is the last to read
        last = {}
        for s, k in enumerate(kernels):
            for o in k.outputs:
                if o:
                    last.setdefault(o, s)
            for v in k.inputs:
                if v in index:
                    last[v] = s
        freed: dict[int, list[int]] = {}
        for n, s in last.items():
            if kinds[index[n]] == abi.VALUE_TEMP:
                freed.setdefault(s, []).append(index[n])
        keep = []
        steps = (abi.DynamicStep * max(len(kernels), 1))()
        for s, (k, (consts, ask_shapes, _)) in enumerate(zip(kernels, runner.plans)):
            st = steps[s]
            st.kernel = k.ptr
            ins = (abi.Tensor * max(len(k.inputs), 1))()
            in_ids = (C.c_int32 * max(len(k.inputs), 1))()
            for i, n in enumerate(k.inputs):
                in_ids[i] = index.get(n, -1) if n else -1
            for i, t in consts.items():  # the tensors the per-kernel path passes
                ins[i] = t
            out_ids = (C.c_int32 * max(len(k.outputs), 1))(
                *[index[o] if o else -1 for o in k.outputs])
            rel = freed.get(s, [])
            rel_ids = (C.c_int32 * max(len(rel), 1))(*rel)
            keep += [ins, in_ids, out_ids, rel_ids]
            st.num_inputs, st.inputs, st.input_values = len(k.inputs), ins, in_ids
            st.num_outputs, st.output_values = len(k.outputs), out_ids
            st.ask_shapes = int(ask_shapes)
            st.num_released, st.released = len(rel), rel_ids
        kind_arr = (C.c_int32 * max(nv, 1))(*kinds)
        keep += [steps, kind_arr, ndims, dims]
        self._keep = keep
        self.plan = abi.DynamicPlan(len(kernels), steps, nv, kind_arr, ndims, dims)
        # the partition's outputs it makes (the rest of what it makes stays inside)
        self.produced = tuple((n, v) for v, n in enumerate(names) if kinds[v] == abi.VALUE_OUTPUT)

        self._runs: dict[int, dict] = {}  # token -> {value index: array} of runs in progress
        self._tokens = itertools.count(1)
        self._alloc = abi.OUTPUT_ALLOC(self._allocate)  # kept: C holds its address

    def _allocate(self, token, v, tensor_p):
        """The run's OUTPUT value v, of the shape the backend found (checked against the
        model: a backend's run_dynamic should have, but the host does not rely on it): the
        caller's bound array when it fits, else a new one."""
        arrays = self._runs.get(token)
        try:
            t = tensor_p.contents
            shape = tuple(t.shape[:t.ndim])
            name, dtype = self.names[v], self.dtypes[v]
            expect = self._expect[v]
            if expect is not None and not _fits(shape, expect, arrays["symbols"]):
                raise self._wrong_shape(name, shape, arrays["symbols"])
            preset = arrays.get(v)  # a backend that asks for every output (before ABI 1.8.1)
            if preset is not None and preset.shape == shape:
                t.data = address_of(preset)
                return 0
            if self._string[v]:  # zeroed elements the backend points at its bytes
                items = string_tensors.output_items(shape)
                t.data = items.ctypes.data
                arrays["strings"].append((v, items, shape))
                return 0
            arr = output_buffer(name, shape, dtype)
            arr = np.empty(shape, dtype) if arr is None else arr
            t.data = address_of(arr)
            arrays[v] = arr
            return 0
        except BaseException as e:  # noqa: BLE001 - raised by run() once the call returns
            if arrays is not None:
                arrays["error"] = e
            return 1

    def _wrong_shape(self, name, shape, syms):
        bound = {n: syms[i] for i, n in enumerate(self.symbol_names) if syms[i] >= 0}
        info = self.spec.values.get(name)
        why = mismatch(shape, None, info, bound) or f"shape {fmt(shape)}"
        return BackendError(
            f"backend {self.lib.id!r}: run_dynamic gave output {name!r} {why}; the backend's "
            f"run_dynamic does not check its kernels' shapes against the plan (report it to "
            f"the backend's authors)")

    def run(self, arrays) -> dict[str, np.ndarray]:
        """{produced partition output name: array} of one run; ``arrays``: one per input of
        the runner, in its order. The symbols are bound from the inputs' shapes here, the rest
        by the backend from the shapes its kernels give; every output is checked against the
        model before the host hands out its memory."""
        values = self._values_type.from_buffer_copy(self._values_template)
        shapes = self._shapes_type.from_buffer_copy(self._shapes_template)
        for i, j, row in self._plain:
            arr = arrays[j]
            t = values[i]
            t.data = address_of(arr)
            t.ndim = n = arr.ndim
            shapes[row:row + n] = arr.shape
        packed = []  # string inputs' elements, alive during the call
        for i, j in self._other:
            arr = arrays[j]
            t = values[i]
            if self._string[i]:
                packed.append(string_tensors.pack(arr, f"value {self.names[i]!r}"))
                t.data = packed[-1].address
            else:
                t.data = address_of(arr)
            t.ndim = n = arr.ndim
            if self.dtypes[i] is None:  # a type the model leaves open: the array's
                t.dtype = abi.dtype_of(arr.dtype)
            shapes[i * ROW:i * ROW + n] = arr.shape
        syms = self._symbols_type.from_buffer_copy(self._unbound)
        sizes = []  # of the bound symbols, then the fixed dims: what presets' shapes are made of
        for j, d, sym in self._binds:
            syms[sym] = size = arrays[j].shape[d]
            sizes.append(size)
        sizes += self._fixed_sizes
        token = next(self._tokens)
        made: dict = {"symbols": syms, "strings": []}
        for v, name, dtype, row, shape_of in self._presets:
            shape = shape_of(sizes)
            arr = output_buffer(name, shape, dtype)
            arr = np.empty(shape, dtype) if arr is None else arr
            t = values[v]
            t.data = address_of(arr)
            t.ndim = n = len(shape)
            shapes[row:row + n] = shape
            made[v] = arr
        self._runs[token] = made
        run = abi.DynamicRun(values, shapes, syms, self._alloc, token, None, -1, -1, 0)
        rc = -1
        try:
            rc = self.fn(C.byref(self.plan), C.byref(run))
        finally:
            del self._runs[token]
            if made["strings"]:  # copied and released, also after a failed run
                step = self.kernels[0].label if len(self.kernels) == 1 else "the partition"
                texts = string_tensors.unpack_outputs(
                    [(self.names[v], items, shape) for v, items, shape in made["strings"]],
                    self.lib.table.release_strings, f"backend {self.lib.id!r}, {step}",
                    rc_ok=rc == 0)
                made.update((self.index[n], a) for n, a in texts.items())
        if rc != 0:
            raise self._error(rc, run, values, made)
        return {n: made[v] for n, v in self.produced if v in made}

    def _error(self, rc, run, values, made):
        step = run.failed_step
        label = self.kernels[step].label if 0 <= step < len(self.kernels) else "the partition"
        lib, v = self.lib, run.failed_value
        if run.failure == abi.DYNAMIC_KERNEL:
            return lib.error(rc, f"running {label}")
        if run.failure == abi.DYNAMIC_ALLOC_FAILED and "error" in made:
            return made["error"]
        name = self.names[v] if 0 <= v < len(self.names) else None
        if run.failure == abi.DYNAMIC_BAD_SHAPE and name is not None:
            t = values[v]
            row = list(t.shape[:min(max(t.ndim, 0), ROW)])
            if not 0 <= t.ndim <= ROW or any(d < 0 for d in row):
                return BackendError(
                    f"backend {lib.id!r}: kernel_output_shapes of {label} gave output {name!r} "
                    f"rank {t.ndim} dims {row}; ranks are 0..{ROW}, dims >= 0")
            info = self.spec.values.get(name)
            why = mismatch(tuple(row), None, info, dict(self._bound(run))) or (
                f"shape {fmt(row)} where the model has {fmt(info.shape)}")
            return BackendError(
                f"backend {lib.id!r}: kernel_output_shapes of {label} gave output {name!r} "
                f"{why}; the backend's shape function is wrong (report it to the backend's "
                f"authors)")
        if run.failure == abi.DYNAMIC_NO_MEMORY:
            what = f"value {name!r}" if name else "a workspace"
            return BackendError(f"backend {lib.id!r}: out of memory allocating {what} of {label}")
        return BackendError(
            f"backend {lib.id!r}: run_dynamic failed at {label} (status "
            f"{abi.STATUS_NAMES.get(rc, rc)}, failure {run.failure}): the plan or the backend's "
            f"run_dynamic is inconsistent (report it to the backend's authors)")

    def _bound(self, run):
        """The symbols bound before the failing step."""
        for i, n in enumerate(self.symbol_names):
            if run.symbols[i] >= 0:
                yield n, run.symbols[i]


def _tuple_getter(indexes: list[int]):
    """A function of a list giving the tuple of its items at ``indexes`` (itemgetter gives a
    bare item for one index)."""
    if len(indexes) >= 2:
        return itemgetter(*indexes)
    if indexes:
        return lambda items, i=indexes[0]: (items[i],)
    return lambda items: ()


def _fits(shape: tuple, expect: tuple, syms) -> bool:
    """Whether ``shape`` is what the plan expects (per dim: >= 0 that size, -1 any, <= -2 the
    symbol -2 - dim, bound here when the run has not bound it yet)."""
    if len(shape) != len(expect):
        return False
    for g, w in zip(shape, expect):
        if w >= 0:
            if g != w:
                return False
        elif w <= -2:
            k = syms[-2 - w]
            if k < 0:
                syms[-2 - w] = g
            elif k != g:
                return False
    return True


def usable(runner) -> bool:
    """Whether ``runner``'s partition can run through ``run_dynamic``: the backend has it and
    works in host memory, and every string value is a partition input or output of a backend
    of ABI 1.7 or newer (a string node is a partition of its own)."""
    if not runner.lib.table.run_dynamic or not runner.host:
        return False
    spec, kernels = runner.spec, runner.state.kernels
    strings = {v for k in kernels for v in k.inputs + k.outputs
               if v and string_tensors.is_string(spec.dtype(v))}
    if not strings:
        return True
    if runner.lib.abi_version < (1, 7, 0):
        return False
    made = {o for k in kernels for o in k.outputs if o}
    inside = made - set(runner.outputs)
    return not (strings & inside)
