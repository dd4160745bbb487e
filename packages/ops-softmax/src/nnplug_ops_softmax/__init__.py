"""nnplug-ops-softmax: the custom op ``cstSoftmax`` (attribute ``axis``, default -1).

- :class:`SoftmaxOp`: the Python op (``shape_infer`` + numpy ``compute``), also the reference.
- ``libnnplug_op_softmax.so`` (beside this file): the native op, a C CPU kernel and an OpenCL
  kernel for the GPU target. :func:`library_path` finds it.
- :func:`register` (the ``nnplug.ops`` entry point): registers the native op. An install
  without the library (built with no C compiler) fails to register with an error saying how to
  rebuild; ``rt.register_custom_op(SoftmaxOp())`` runs the Python op instead.

Models use it from any custom domain, e.g. ``helper.make_node("cstSoftmax", ["x"], ["y"],
domain="com.example", axis=1)``.
"""

from __future__ import annotations

import numpy as np

from nnplug import packaged_library

from ._version import __version__

OP_TYPE = "cstSoftmax"
LIBRARY = "libnnplug_op_softmax.so"


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """The reference: exp(x - max) / sum(exp(x - max)) along ``axis``, in x's dtype.

    A NaN or +inf in a slice, or a slice of only -inf, gives NaN for the whole slice."""
    x = np.asarray(x)
    if x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"cstSoftmax: axis {axis} is out of range for rank {x.ndim}")
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True) if x.size else x
        e = np.exp(x - m)
        return (e / np.sum(e, axis=axis, keepdims=True)).astype(x.dtype, copy=False)


class SoftmaxOp:
    """``cstSoftmax`` as a Python custom op (RKNN toolkit style)."""

    op_type = OP_TYPE

    def _axis(self, node, rank: int) -> int:
        axis = int(node.attrs.get("axis", -1))
        if rank == 0 or not -rank <= axis < rank:
            raise ValueError(f"attribute axis={axis} is out of range for an input of rank {rank}")
        return axis

    def shape_infer(self, node, in_shapes, in_dtypes):
        if len(in_shapes) != 1:
            raise ValueError("cstSoftmax takes one input")
        self._axis(node, len(in_shapes[0]))
        return [list(in_shapes[0])], [in_dtypes[0]]

    def compute(self, node, inputs):
        (x,) = inputs
        return [softmax(x, self._axis(node, x.ndim))]


def library_path() -> str:
    """The packaged native library; a nnplug.NativeLibraryMissingError saying how to rebuild
    when this install has none."""
    return packaged_library(__file__, LIBRARY)


def register(runtime) -> None:
    """``nnplug.ops`` entry point: register cstSoftmax's native library with ``runtime``."""
    runtime.register_custom_ops_library(library_path())


__all__ = ["OP_TYPE", "SoftmaxOp", "__version__", "library_path", "register", "softmax"]
