"""A native custom op: one op type of a loaded library, with its CPU and/or GPU implementation.

Its shapes come from the library's ``shape_infer`` (an override without one keeps ONNX's own);
binding it to a node makes the node's context and calls ``init``
(:mod:`nnplug.native.op_executor` runs it from there).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np

from ..customop import CustomOp, is_standard_op
from ..device import CPU
from ..errors import CustomOpError
from ..tensor import HOST_API
from . import abi
from .op_abi import MAX_DIMS, SKIP, OpTensor
from .op_executor import NativeBound, NodeState, arrays, tensor_attr, value_attr

if TYPE_CHECKING:
    from .op_library import OpImpl, OpLibrary

log = logging.getLogger("nnplug.ops")


class NativeCustomOp(CustomOp):
    """One op type of a native library, with its CPU and/or GPU implementation."""

    def __init__(self, op_type: str, impls: dict[str, OpImpl], library: OpLibrary):
        self.op_type = op_type
        self.impls = impls
        self.library = library
        self.source = library.path + (f" ({library.name})" if library.name else "")
        self.override = is_standard_op(op_type)
        self.targets = tuple(t for t in ("gpu", "cpu") if t in impls)
        self.runs_anywhere = "cpu" in impls
        self._warned: set[str] = set()

    # -- shapes ----------------------------------------------------------------------------
    def _shape_impl(self) -> OpImpl | None:
        for t in ("cpu", "gpu"):
            impl = self.impls.get(t)
            if impl is not None and impl.struct.shape_infer:
                return impl
        return None

    def shape_infer(self, node, in_shapes, in_dtypes):
        impl = self._shape_impl()
        if impl is None:
            if self.override:
                return _onnx_shapes(node, in_shapes, in_dtypes)
            raise CustomOpError(
                f"custom op {self.op_type!r} ({self.source}) has no shape_infer callback, so "
                f"the shapes of node {node.name!r}'s outputs are unknown; implement "
                f"shape_infer in the library (see nnplug/custom_op.h)")
        state = NodeState(self, impl, node, "cpu")
        ins = [tensor_attr(state, name, shape, dtype)
               for name, shape, dtype in zip([x for x in node.inputs if x], in_shapes, in_dtypes)]
        outs = (OpTensor * max(len(node.outputs), 1))()
        for i, name in enumerate(node.outputs):
            outs[i].attr.name = state.hold(name.encode())
        ins_arr = (OpTensor * max(len(ins), 1))(*ins)
        state.call("shape_infer", impl.struct.shape_infer, ins_arr, len(ins), outs,
                   len(node.outputs))
        shapes, dtypes = [], []
        for i in range(len(node.outputs)):
            a = outs[i].attr
            if a.n_dims > MAX_DIMS:
                raise state.error("shape_infer", f"output {i} has n_dims {a.n_dims} > {MAX_DIMS}")
            dt = abi.numpy_dtype(a.dtype)
            if dt is None:
                raise state.error("shape_infer", f"output {i} has no valid dtype "
                                  f"(code {a.dtype.code}, bits {a.dtype.bits})")
            shapes.append([int(d) if d >= 0 else None for d in a.dims[:a.n_dims]])
            dtypes.append(dt)
        return shapes, dtypes

    # -- binding -----------------------------------------------------------------------------
    def bind(self, node, values, target, backend):
        impl = self.impls[target]
        state = NodeState(self, impl, node, target)
        if target == "gpu":
            if not state.attach_gpu(backend):
                return None
        else:
            state.device, state.api = CPU, HOST_API
        ins = [value_attr(state, x, values) for x in node.inputs if x]
        outs = [value_attr(state, x, values) for x in node.outputs]
        try:
            rc = state.call("init", impl.struct.init, *arrays(ins, outs)) \
                if impl.struct.init else 0
        except BaseException:
            state.release_gpu()
            raise
        if rc == SKIP:
            log.debug("%s: init declined node %r (NNP_OP_SKIP); the backends' kernel is used",
                      self.op_type, node.name)
            state.release_gpu()
            return None
        return NativeBound(state, ins, outs, values)

    def warn_once(self, key: str, msg: str, *args) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logging.getLogger("nnplug").warning(msg, *args)

    def release(self) -> None:
        """Runtime.close: drop the op's OpenCL programs (kernels keep theirs alive)."""
        for impl in self.impls.values():
            impl.release()


def _onnx_shapes(node, in_shapes, in_dtypes):
    """Output shapes of a standard ONNX node, by ONNX's own inference on a one-node model."""
    import onnx

    def vi(name, shape, dtype):
        dims = None if shape is None else [d if isinstance(d, (int, str)) else None for d in shape]
        return onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims)

    names = [x for x in node.inputs if x]
    graph = onnx.helper.make_graph(
        [node.proto], "one", [vi(n, s, d) for n, s, d in zip(names, in_shapes, in_dtypes)],
        [onnx.helper.make_tensor_value_info(o, 0, None) for o in node.outputs if o])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", node.opset or 13)])
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    found = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    shapes, dtypes = [], []
    for o in node.outputs:
        t = found[o].type.tensor_type
        shapes.append([d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                       for d in t.shape.dim] if t.HasField("shape") else None)
        dtypes.append(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
    return shapes, dtypes
