"""Values that are not tensors: sequences of tensors, sequences of maps and empty optionals.

They live on the host and only the core's structural ops (:mod:`nnplug.structural`) and
control flow touch them; backends see tensors only. An optional that holds a value is that
value itself; an empty one is :data:`NONE`.
"""

from __future__ import annotations

import numpy as np

from .device import CPU
from .tensor import Tensor


class TensorSequence:
    """An ONNX sequence: an immutable list of host tensors (ops build new sequences)."""

    __slots__ = ("items", "dtype")
    device = CPU

    def __init__(self, items, dtype=None):
        self.items = tuple(items)
        self.dtype = np.dtype(dtype) if dtype is not None else (
            self.items[0].dtype if self.items else None)

    def to(self, device, api=None) -> TensorSequence:
        return TensorSequence([t.to(device, api) for t in self.items], self.dtype)

    def numpy(self) -> list[np.ndarray]:
        return [t.numpy() for t in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"TensorSequence({len(self.items)} tensors, dtype={self.dtype})"


class MapSequence:
    """An ONNX ``seq(map(K, V))`` as ``ai.onnx.ml.ZipMap`` makes it: a tuple of dicts from a
    class label (int or str) to a Python float, the form onnxruntime returns."""

    __slots__ = ("items", "_fresh")
    device = CPU

    def __init__(self, items, fresh: bool = False):
        self.items = tuple(items)
        self._fresh = fresh
        """Its dicts were made for this value alone (ZipMap's, in one run): the first
        :meth:`numpy` hands them out instead of copying them."""

    def to(self, device, api=None) -> MapSequence:
        return self  # host-only, like every non-tensor value

    def numpy(self) -> list[dict]:
        if self._fresh:  # once: later calls copy (another output of the same value)
            self._fresh = False
            return list(self.items)
        return [dict(m) for m in self.items]

    def __len__(self) -> int:
        return len(self.items)

    def __repr__(self) -> str:
        return f"MapSequence({len(self.items)} maps)"


class _NoValue:
    """The value of an empty optional."""

    __slots__ = ()
    device = CPU

    def to(self, device, api=None) -> _NoValue:
        return self

    def numpy(self):
        return None

    def __repr__(self) -> str:
        return "nnplug.values.NONE"


NONE = _NoValue()


def from_host(x):
    """A value for the executor from what a user (or Network.run) gives: an array, a list
    of arrays (a sequence) or None (an empty optional)."""
    if isinstance(x, (Tensor, TensorSequence, MapSequence, _NoValue)):
        return x
    if x is None:
        return NONE
    if isinstance(x, (list, tuple)):
        return TensorSequence([from_host(v) for v in x])
    return Tensor.from_numpy(np.asarray(x))


__all__ = ["NONE", "MapSequence", "TensorSequence", "from_host"]
