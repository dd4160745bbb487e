"""Running a native custom op on a node: the node's context and the calls into the op.

Per node: ``init`` once when it is bound (it may decline with ``NNP_OP_SKIP``), ``prepare`` +
``compute`` per run, ``destroy`` once when the network goes. Callback calls and tensor
attributes are logged at DEBUG on ``nnplug.ops``. The GPU target's OpenCL objects come from
the backend (:mod:`nnplug.native.op_opencl`).
"""

from __future__ import annotations

import ctypes as C
import itertools
import logging
import threading
import weakref
from typing import TYPE_CHECKING

import numpy as np

from ..customop import BoundOp
from ..device import CPU, Device
from ..device_api import workspace_data
from ..errors import CustomOpError
from ..shapecheck import bind_symbols, mismatch
from ..tensor import HOST_API, Tensor
from ..threads import thread_count
from . import abi, strings
from .descs import DescBuilder
from .op_abi import (
    GET_ATTR,
    LAYOUT_NCHW,
    MAX_DIMS,
    SET_ERROR,
    SKIP,
    TARGET_CPU,
    TARGET_GPU,
    OpContext,
    OpTensor,
    OpTensorAttr,
    returned,
)
from .op_opencl import OpenCLBinding

if TYPE_CHECKING:
    from .op import NativeCustomOp
    from .op_library import OpImpl

log = logging.getLogger("nnplug.ops")

NUMPY_DTYPES = {np.dtype(np.float32), np.dtype(np.int64), np.dtype(np.float64),
                np.dtype(np.int32), np.dtype(np.uint8), np.dtype(np.int8), np.dtype(bool),
                np.dtype(np.float16)}
"""The element types that cross the C ABI."""


# -- per-node state and callbacks ----------------------------------------------------------------
_states: dict[int, NodeState] = {}
_states_lock = threading.Lock()
_keys = itertools.count(1)


def _state_of(ctx) -> NodeState | None:
    with _states_lock:
        return _states.get(ctx.contents.host_data or 0)


def _get_attr(ctx, name, out):
    try:
        state = _state_of(ctx)
        s = strings.read(name, strings.MAX_NAME_BYTES)
        text = s.text if s is not None and not s.problem else ""
        if state is None or not out:
            return 2
        C.memset(out, 0, C.sizeof(abi.Attr))
        node = state.node
        if text not in node.attrs:
            log.debug("%s[%s] get_attr(%r): no such attribute", state.op.op_type, node.name, text)
            return 2
        types = {a.name: int(a.type) for a in node.proto.attribute} if node.proto else {}
        state.descs.attr(text, node.attrs[text], types.get(text), out.contents)
        log.debug("%s[%s] get_attr(%r) -> type %d, count %d", state.op.op_type, node.name, text,
                  out.contents.type, out.contents.count)
        return 0
    except Exception as e:  # never let an exception cross into C
        log.error("nnplug: get_attr failed: %s", e)
        return 1


def _set_error(ctx, message):
    state = _state_of(ctx)
    if state is not None:
        state.last_error.text = strings.message(message)


_GET_ATTR = GET_ATTR(_get_attr)
_SET_ERROR = SET_ERROR(_set_error)


class NodeState:
    """The context of one node: what the callbacks of that node see."""

    def __init__(self, op: NativeCustomOp, impl: OpImpl, node, target: str):
        self.op, self.impl, self.node, self.target = op, impl, node, target
        self.descs = DescBuilder({}, {})
        self._keep: list = []
        self.last_error = threading.local()
        self.lock = threading.Lock()
        self.device: Device = CPU
        self.api = HOST_API
        self.opencl: OpenCLBinding | None = None  # the GPU target's kernel and handles
        self.key = next(_keys)
        ctx = self.ctx = OpContext()
        ctx.struct_size = C.sizeof(OpContext)
        ctx.target = TARGET_CPU if target == "cpu" else TARGET_GPU
        ctx.op_type = self.hold(op.op_type.encode())
        ctx.node_name = self.hold((node.name or "").encode())
        ctx.num_threads = thread_count()
        ctx.get_attr = _GET_ATTR
        ctx.set_error = _SET_ERROR
        ctx.host_data = self.key
        with _states_lock:
            _states[self.key] = self
        self._finalizer = weakref.finalize(self, _forget, self.key)

    def hold(self, obj):
        self._keep.append(obj)
        return obj

    # -- GPU -------------------------------------------------------------------------------
    def attach_gpu(self, backend) -> bool:
        """Take the OpenCL handles of ``backend``'s device and create this node's kernel;
        False (with a warning once) when the backend cannot hand them over."""
        binding = OpenCLBinding(self, backend)
        if not binding.available:
            self.op.warn_once(backend.id, "nnplug: custom op %r has a GPU kernel but backend %r "
                              "exposes no OpenCL handles (DeviceAPI.opencl_handles); using its "
                              "own kernel or the CPU one", self.op.op_type, backend.id)
            return False
        self.device, self.api = binding.device, binding.api
        self.opencl = binding
        binding.attach()
        return True

    def release_gpu(self) -> None:
        if self.opencl is not None:
            self.opencl.release()

    # -- calls -----------------------------------------------------------------------------
    def call(self, name: str, fn, ins, n_ins, outs, n_outs) -> int:
        """Call one callback; non-zero (except SKIP from init) raises CustomOpError."""
        verbose = log.isEnabledFor(logging.DEBUG)
        if verbose:
            log.debug("%s[%s] %s(%s)", self.op.op_type, self.node.name, name,
                      _describe(ins, n_ins, outs, n_outs, name != "shape_infer"))
        self.last_error.text = ""
        rc = fn(C.byref(self.ctx), ins, n_ins, outs, n_outs)
        if verbose:
            log.debug("%s[%s] %s -> %d", self.op.op_type, self.node.name, name, rc)
        if rc != 0 and not (name == "init" and rc == SKIP):
            raise self.error(name, returned(rc))
        return rc

    def error(self, callback: str, what: str) -> CustomOpError:
        msg = getattr(self.last_error, "text", "")
        return CustomOpError(
            f"custom op {self.op.op_type!r} ({self.target}, {self.op.source}) failed in "
            f"{callback}() on node {self.node.name!r}: {what}" + (
                f": {msg}" if msg else " and gave no message (the op did not call "
                                      "ctx->set_error)"))


def _forget(key: int) -> None:
    with _states_lock:
        _states.pop(key, None)


def _describe(ins, n_ins, outs, n_outs, with_mem: bool) -> str:
    def one(t):
        a = t.attr
        dims = ",".join(str(d) for d in a.dims[:a.n_dims])
        dt = abi.numpy_dtype(a.dtype)
        text = f"{(a.name or b'').decode()}: {dt}[{dims}] n_elems={a.n_elems} size={a.size}"
        if with_mem:
            text += f" mem=({t.mem.base and hex(t.mem.base)}+{t.mem.offset}, {t.mem.size})"
        return text

    return ("inputs [" + "; ".join(one(ins[i]) for i in range(n_ins)) + "] outputs ["
            + "; ".join(one(outs[i]) for i in range(n_outs)) + "]")


def _fill_attr(attr: OpTensorAttr, state: NodeState, name: str, shape, dtype) -> None:
    attr.name = state.hold(name.encode())
    attr.layout = LAYOUT_NCHW
    attr.dtype = abi.dtype_of(dtype)
    if shape is None:
        attr.n_dims = 0
        return
    if len(shape) > MAX_DIMS:
        raise CustomOpError(f"custom op {state.op.op_type!r} on node {state.node.name!r}: "
                            f"{name!r} has rank {len(shape)} > {MAX_DIMS}")
    dims = [int(d) if isinstance(d, (int, np.integer)) and d >= 0 else -1 for d in shape]
    attr.n_dims = len(dims)
    for i, d in enumerate(dims):
        attr.dims[i] = d
    known = all(d >= 0 for d in dims)
    attr.n_elems = int(np.prod(dims, dtype=np.int64)) if known else 0
    attr.size = attr.n_elems * (np.dtype(dtype).itemsize if dtype is not None else 0)


def tensor_attr(state, name, shape, dtype) -> OpTensor:
    t = OpTensor()
    _fill_attr(t.attr, state, name, shape, dtype)
    return t


def value_attr(state, name, values) -> OpTensor:
    v = values.get(name)
    return tensor_attr(state, name, getattr(v, "shape", None), getattr(v, "dtype", None))


def _static(v) -> tuple | None:
    return tuple(v.shape) if v is not None and getattr(v, "is_static", False) else None


def arrays(ins: list, outs: list):
    a = (OpTensor * max(len(ins), 1))(*ins)
    b = (OpTensor * max(len(outs), 1))(*outs)
    return a, len(ins), b, len(outs)


# -- running -------------------------------------------------------------------------------------
class NativeBound(BoundOp):
    """A native op bound to one node: prepare + compute per run; destroy once."""

    def __init__(self, state: NodeState, ins: list[OpTensor], outs: list[OpTensor], values):
        self.state = state
        self.device = state.device
        self.api = state.api
        self.node = state.node
        self.in_shapes = [_static(values.get(x)) for x in self.node.inputs if x]
        self.declared_inputs = [values.get(x) for x in self.node.inputs if x]
        self.declared_outputs = [values.get(o) if o else None for o in self.node.outputs]
        self.out_static = []
        for name in self.node.outputs:
            v = values.get(name)
            shape = _static(v)
            self.out_static.append(None if shape is None or v.dtype is None
                                   else (shape, np.dtype(v.dtype)))
        self._specs: dict[tuple, list] = {}  # input shapes/dtypes -> output specs
        self._finalizer = weakref.finalize(self, _destroy, state)

    def _output_specs(self, inputs: list[Tensor]):
        shapes = [tuple(t.shape) for t in inputs]
        if all(s is not None for s in self.out_static) and shapes == self.in_shapes:
            return self.out_static
        key = tuple(shapes) + tuple(t.dtype.str for t in inputs)
        specs = self._specs.get(key)
        if specs is None:
            specs = self._infer_specs(inputs, shapes)
            if len(self._specs) >= 64:  # symbolic shapes: keep the recent ones only
                self._specs.clear()
            self._specs[key] = specs
        return specs

    def _infer_specs(self, inputs: list[Tensor], shapes: list[tuple]):
        out_shapes, out_dtypes = self.state.op.shape_infer(
            self.node, [list(s) for s in shapes], [t.dtype for t in inputs])
        specs = []
        for name, s, d in zip(self.node.outputs, out_shapes, out_dtypes):
            if s is None or any(not isinstance(x, int) or x < 0 for x in s):
                raise CustomOpError(
                    f"custom op {self.state.op.op_type!r}: the shape of output {name!r} of node "
                    f"{self.node.name!r} is not known for inputs {shapes}")
            specs.append((tuple(s), np.dtype(d)))
        symbols: dict[str, int] = {}
        for declared, shape in zip(self.declared_inputs, shapes):
            bind_symbols(declared, shape, symbols)
        for name, declared, (shape, dtype) in zip(self.node.outputs, self.declared_outputs, specs):
            why = name and mismatch(shape, dtype, declared, symbols)
            if why:
                raise CustomOpError(
                    f"custom op {self.state.op.op_type!r} ({self.state.op.source}) shape_infer() "
                    f"on node {self.node.name!r} gave output {name!r} {why}; fix the op's "
                    f"shape_infer")
        return specs

    def run(self, inputs: list[Tensor]) -> list[Tensor]:
        st = self.state
        if not self._finalizer.alive:
            raise CustomOpError(f"custom op {st.op.op_type!r} on node {self.node.name!r} was "
                                f"released (its network was closed)")
        for t in inputs:
            if t.dtype not in NUMPY_DTYPES:
                raise CustomOpError(f"custom op {st.op.op_type!r} on node {self.node.name!r}: "
                                    f"input dtype {t.dtype} cannot cross the C ABI")
        specs = self._output_specs(inputs)
        outputs = [Tensor.empty(s, d, self.device, self.api) for s, d in specs]
        names_in = [x for x in self.node.inputs if x]
        ins = [self._op_tensor(n, t) for n, t in zip(names_in, inputs)]
        outs = [self._op_tensor(n, t) for n, t in zip(self.node.outputs, outputs)]
        args = arrays(ins, outs)
        keep = (inputs, outputs)  # the memory behind mem.base stays alive through the calls
        with st.lock:
            if st.opencl is not None:
                st.opencl.refresh_queue()
            if st.impl.struct.prepare:
                st.call("prepare", st.impl.struct.prepare, *args)
            st.call("compute", st.impl.struct.compute, *args)
            if st.opencl is not None:
                st.opencl.finish()
        del keep
        return outputs

    def _op_tensor(self, name: str, t: Tensor) -> OpTensor:
        ot = tensor_attr(self.state, name, t.shape, t.dtype)
        if self.state.opencl is not None:
            ot.mem.base = self.state.opencl.buffer(t.handle) if t.nbytes else None
        else:
            arr = np.asarray(workspace_data(t.handle))
            ot.mem.base = arr.ctypes.data
        ot.mem.offset = t.byte_offset
        ot.mem.size = t.nbytes
        return ot

    def close(self) -> None:
        self._finalizer()


def _destroy(state: NodeState) -> None:
    """destroy once per bound node (network closed or collected, or interpreter exit)."""
    try:
        fn = state.impl.struct.destroy
        if fn:
            with state.lock:
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("%s[%s] destroy()", state.op.op_type, state.node.name)
                rc = fn(C.byref(state.ctx))
            if rc != 0:
                logging.getLogger("nnplug").warning(
                    "nnplug: %s", state.error("destroy", returned(rc)))
    finally:
        state.release_gpu()
        _forget(state.key)
