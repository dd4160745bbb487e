"""Sequence and optional ops, run by the core on the host when no backend claims them.

They move references to tensors (build a sequence, pick an element, wrap a value in an
optional); SplitToSequence and ConcatFromSequence copy data once, with numpy; ``ai.onnx.ml``
ZipMap turns a score tensor into a sequence of maps, the one map-valued op. Identity
of a sequence or an optional is run here too. A backend that claims one of these nodes
keeps it, as with any op.
"""

from __future__ import annotations

import numpy as np
import onnx

from .device import CPU
from .errors import BackendError
from .graph import Node, SubGraph
from .plan import Step
from .tensor import HOST_API, Tensor
from .values import NONE, MapSequence, TensorSequence


def _seq(node: Node, v, what="input 0") -> TensorSequence:
    if not isinstance(v, TensorSequence):
        raise BackendError(f"{node.describe()}: {what} must be a sequence, got {type(v).__name__}")
    return v


def _position(node: Node, pos: Tensor | None, n: int, default: int, insert=False) -> int:
    if pos is None:
        return default
    p = int(pos.numpy().reshape(()).item())
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise BackendError(f"{node.describe()}: position {p} is out of range for a sequence "
                           f"of {n} tensor(s)")
    return p + n if p < 0 else p


def _sequence_empty(node, ins):
    elem = node.attr("dtype", onnx.TensorProto.FLOAT)
    return [TensorSequence([], onnx.helper.tensor_dtype_to_np_dtype(elem))]


def _sequence_construct(node, ins):
    return [TensorSequence(ins)]


def _sequence_at(node, ins):
    s = _seq(node, ins[0])
    return [s.items[_position(node, ins[1], len(s), 0)]]


def _sequence_insert(node, ins):
    s = _seq(node, ins[0])
    pos = _position(node, ins[2] if len(ins) > 2 else None, len(s), len(s), insert=True)
    items = list(s.items)
    items.insert(pos, ins[1])
    return [TensorSequence(items, s.dtype)]


def _sequence_erase(node, ins):
    s = _seq(node, ins[0])
    if not len(s):
        raise BackendError(f"{node.describe()}: cannot erase from an empty sequence")
    pos = _position(node, ins[1] if len(ins) > 1 else None, len(s), len(s) - 1)
    items = list(s.items)
    del items[pos]
    return [TensorSequence(items, s.dtype)]


def _sequence_length(node, ins):
    return [Tensor.from_numpy(np.array(len(_seq(node, ins[0])), np.int64))]


def _split_to_sequence(node, ins):
    x = ins[0].numpy()
    axis = int(node.attr("axis", 0))
    axis = axis + x.ndim if axis < 0 else axis
    split = ins[1].numpy() if len(ins) > 1 and ins[1] is not None else None
    if split is None:
        parts = np.split(x, x.shape[axis], axis=axis)
        if not node.attr("keepdims", 1):
            parts = [np.squeeze(p, axis=axis) for p in parts]
    else:
        if split.ndim == 0:
            size = int(split)
            cuts = list(range(size, x.shape[axis], size))
        else:
            if int(split.sum()) != x.shape[axis]:
                raise BackendError(f"{node.describe()}: split sizes {split.tolist()} do not add "
                                   f"up to dimension {axis} ({x.shape[axis]})")
            cuts = list(np.cumsum(split)[:-1])
        parts = np.split(x, cuts, axis=axis)
    return [TensorSequence([Tensor.from_numpy(np.ascontiguousarray(p)) for p in parts], x.dtype)]


def _concat_from_sequence(node, ins):
    s = _seq(node, ins[0])
    arrays = s.numpy()
    if not arrays:
        raise BackendError(f"{node.describe()}: cannot concatenate an empty sequence")
    axis = int(node.attr("axis"))
    if node.attr("new_axis", 0):
        nd = arrays[0].ndim + 1
        return [Tensor.from_numpy(np.stack(arrays, axis=axis + nd if axis < 0 else axis))]
    return [Tensor.from_numpy(np.concatenate(arrays, axis=axis))]


def _optional(node, ins):
    return [ins[0] if ins and ins[0] is not None else NONE]


def _optional_has_element(node, ins):
    has = bool(ins) and ins[0] is not None and ins[0] is not NONE
    return [Tensor.from_numpy(np.array(has))]


def _optional_get_element(node, ins):
    if not ins or ins[0] is None or ins[0] is NONE:
        raise BackendError(f"{node.describe()}: the optional input is empty")
    return [ins[0]]


class _ZipMap:
    """ai.onnx.ml ZipMap: row i of X [N, C] (or X [C], one row) becomes {label_j: X[i, j]}.
    The labels, checked and in the order of onnxruntime's maps (sorted keys, std::map), are
    read from the node once."""

    def __init__(self, node):
        self.node = node
        ints, strings = node.attr("classlabels_int64s", None), node.attr("classlabels_strings", None)
        self.problem = None
        if bool(ints) == bool(strings):
            self.problem = (f"{node.describe()}: exactly one of the attributes "
                            f"'classlabels_int64s' and 'classlabels_strings' must be given")
            ints = []
        labels = [int(v) for v in ints] if ints else [
            v.decode() if isinstance(v, bytes) else str(v) for v in strings or ()]
        order = sorted(range(len(labels)), key=labels.__getitem__)
        self.order = None if order == list(range(len(labels))) else order
        self.labels = [labels[j] for j in order]
        self.rows_to_maps = _rows_to_maps(self.labels)

    def __call__(self, node, ins):  # a StructuralOp's fn(node, inputs)
        return [self.maps(ins[0].numpy())]

    def maps(self, x: np.ndarray) -> MapSequence:
        return MapSequence(self.dicts(x), fresh=True)

    def dicts(self, x: np.ndarray) -> list[dict]:
        """The maps as the caller gets them: a list of dicts."""
        if self.problem:
            raise BackendError(self.problem)
        labels = self.labels
        if x.dtype != np.float32:
            raise BackendError(f"{self.node.describe()}: input X must be float32, got {x.dtype}")
        shape = x.shape  # as given, for the message
        if x.ndim == 1:
            x = x.reshape(1, -1)
        if x.ndim != 2 or x.shape[1] != len(labels):
            raise BackendError(f"{self.node.describe()}: input X of shape {list(shape)} must be "
                               f"[N, {len(labels)}] or [{len(labels)}], one column per class "
                               f"label")
        if self.order is not None:
            x = x[:, self.order]
        return self.rows_to_maps(x.tolist())  # Python floats, as onnxruntime gives


def _rows_to_maps(labels: list):
    """A function of rows (lists of len(labels) floats) giving one {label: value} dict per row.
    A dict display with the labels bound as names builds each dict in 0.4 of dict(zip())'s
    time (four classes, 1,000 rows: 125 us against 307); the source it compiles holds only
    indexes, never a label."""
    n = len(labels)
    if not 0 < n <= 64:
        return lambda rows: [dict(zip(labels, row)) for row in rows]
    keys = ", ".join(f"k{i}: v{i}" for i in range(n))
    values = ", ".join(f"v{i}" for i in range(n))
    return eval(f"lambda rows: [{{{keys}}} for {values}, in rows]",  # noqa: S307 - indexes only
                {f"k{i}": label for i, label in enumerate(labels)})


def _identity(node, ins):
    return [ins[0]]


OPS = {
    "SequenceEmpty": _sequence_empty, "SequenceConstruct": _sequence_construct,
    "SequenceAt": _sequence_at, "SequenceInsert": _sequence_insert,
    "SequenceErase": _sequence_erase, "SequenceLength": _sequence_length,
    "SplitToSequence": _split_to_sequence, "ConcatFromSequence": _concat_from_sequence,
    "Optional": _optional, "OptionalHasElement": _optional_has_element,
    "OptionalGetElement": _optional_get_element,
}
ML_OPS = {"ZipMap": _ZipMap}
"""Ops of ai.onnx.ml: ZipMap is made per node (its labels read once), then run as the others."""


class StructuralOp:
    """A placed sequence/optional node; its step runs the op on the host."""

    label = "core"

    def __init__(self, node: Node, fn):
        self.node = node
        self.fn = fn
        self.assignment: dict[str, str] = {}

    def step(self, sg: SubGraph) -> Step:
        node, fn = self.node, self.fn
        zip_map = _ZipMap(node) if fn is _ZipMap else None
        fn = zip_map if zip_map is not None else fn
        consts = {x: Tensor.from_numpy(a) for x, a in sg.constants.items()}
        slots = [None if not x else (consts[x] if x in consts else sg.inputs.index(x))
                 for x in node.inputs]
        positions = [node.outputs.index(o) for o in sg.outputs]

        def run(ins):
            args = [None if s is None else (ins[s] if isinstance(s, int) else s) for s in slots]
            while args and args[-1] is None:
                args.pop()  # trailing omitted optional inputs
            outs = fn(node, args)
            return [outs[p] for p in positions]

        # ZipMap takes an array and makes a host value: it also runs on the host path (a
        # classifier exported by skl2onnx ends in one), from arrays to the caller's dicts
        run_arrays = None
        if zip_map is not None and len(sg.inputs) == 1 and not consts:
            def run_arrays(arrays):
                return [zip_map.dicts(arrays[0])]

        return Step("core", [node.name], sg.inputs, sg.outputs, CPU, HOST_API, run,
                    run_arrays=run_arrays)


def place_structural(node: Node, graph: SubGraph) -> StructuralOp | None:
    """A StructuralOp for a sequence/optional/ZipMap node (or an Identity of one), else None."""
    if node.domain == "ai.onnx.ml":
        fn = ML_OPS.get(node.op_type)
        return StructuralOp(node, fn) if fn is not None else None
    if node.domain not in ("", "ai.onnx"):
        return None
    fn = OPS.get(node.op_type)
    if fn is None and node.op_type == "Identity" and node.inputs:
        kind = graph.value(node.inputs[0]).kind
        fn = _identity if kind in ("sequence", "optional") else None
    return StructuralOp(node, fn) if fn is not None else None


__all__ = ["OPS", "StructuralOp", "place_structural"]
