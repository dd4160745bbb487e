"""nnplug-ops-argmax: kernels that override the standard ONNX ``ArgMax``.

Attributes ``axis`` (default 0), ``keepdims`` (default 1), ``select_last_index`` (default 0);
float32 input, int64 output. NaN counts as the largest value (as numpy and onnx.reference):
the first NaN of a slice wins, or the last with ``select_last_index``; ties give the first
index, or the last with ``select_last_index``.

- :class:`ArgMaxOp`: the Python op (``shape_infer`` + numpy ``compute``), also the reference.
- ``libnnplug_op_argmax.so`` (beside this file): a C CPU kernel and an OpenCL kernel for the GPU
  target. Inputs of other types are declined (init returns NNP_OP_SKIP), so a backend's own
  ArgMax runs them.
- :func:`register` (the ``nnplug.ops`` entry point): registers the native op. An install
  without the library (built with no C compiler) fails to register with an error saying how to
  rebuild; ``rt.register_custom_op(ArgMaxOp(), override=True)`` runs the Python op instead.
  Overrides are switched off with ``nnplug.CreationOptions(disable_op_overrides=True)``.
"""

from __future__ import annotations

import numpy as np

from nnplug import packaged_library

from ._version import __version__

OP_TYPE = "ArgMax"
LIBRARY = "libnnplug_op_argmax.so"


def argmax(x: np.ndarray, axis: int = 0, keepdims: int = 1,
           select_last_index: int = 0) -> np.ndarray:
    """The reference ArgMax (int64), with onnxruntime's rule for NaN: the running best starts
    at a slice's first element and a value replaces it only when it compares greater (or equal,
    with ``select_last_index``), which a NaN never does, so a NaN is picked only when it comes
    first. (numpy's argmax picks the first NaN wherever it is.)"""
    x = np.asarray(x)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"ArgMax: axis {axis} is out of range for rank {x.ndim}")
    if x.shape[axis] == 0:
        raise ValueError("ArgMax over an empty axis has no answer")
    xs = np.moveaxis(x, axis, 0)
    best, at = xs[0].copy(), np.zeros(xs.shape[1:], np.int64)
    with np.errstate(invalid="ignore"):
        for k in range(1, xs.shape[0]):
            take = xs[k] >= best if select_last_index else xs[k] > best
            best = np.where(take, xs[k], best)
            at = np.where(take, k, at)
    return np.expand_dims(at, axis) if keepdims else at


class ArgMaxOp:
    """ArgMax as a Python custom op overriding the backends' kernel."""

    op_type = OP_TYPE
    override = True

    @staticmethod
    def _attrs(node, rank):
        axis = int(node.attrs.get("axis", 0))
        if rank == 0 or not -rank <= axis < rank:
            raise ValueError(f"attribute axis={axis} is out of range for an input of rank {rank}")
        return (axis % rank, int(node.attrs.get("keepdims", 1)),
                int(node.attrs.get("select_last_index", 0)))

    def shape_infer(self, node, in_shapes, in_dtypes):
        (shape,) = in_shapes
        axis, keepdims, _ = self._attrs(node, len(shape))
        out = [1 if d == axis else s for d, s in enumerate(shape) if keepdims or d != axis]
        return [out], [np.dtype(np.int64)]

    def compute(self, node, inputs):
        (x,) = inputs
        axis, keepdims, last = self._attrs(node, x.ndim)
        return [argmax(x, axis, keepdims, last)]


def library_path() -> str:
    """The packaged native library; a nnplug.NativeLibraryMissingError saying how to rebuild
    when this install has none."""
    return packaged_library(__file__, LIBRARY)


def register(runtime) -> None:
    """``nnplug.ops`` entry point: register the ArgMax override's native library with
    ``runtime``."""
    runtime.register_custom_ops_library(library_path())


__all__ = ["ArgMaxOp", "OP_TYPE", "__version__", "argmax", "library_path", "register"]
