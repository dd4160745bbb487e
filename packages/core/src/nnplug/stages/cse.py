"""The merge stage: nodes that compute the same thing from the same inputs run once.

Two nodes are the same computation when they have the same op (type and domain), the same
attributes and the same inputs, where a constant input counts by its value, not its name:
exporters repeat a subexpression per layer with constants of their own (BERT's attention
mask, ``Where(mask, -inf, 0)``, once in each of its twelve layers). The later node is dropped
and its readers read the first one's outputs, as onnxruntime's common subexpression
elimination does at its basic level.

Left alone: random ops and Dropout, custom ops (they may keep state), non-standard domains,
nodes with subgraphs or whose outputs a subgraph node reads (a body names outer values
itself), and nodes with a graph output (its name must stay).

An ``Identity`` computes what it reads: it is dropped as well, its readers reading its input,
or, when its output is a graph output, its input's producer writing that output directly (as
onnxruntime's identity elimination does). A run then makes no copy, and a string or sequence
value passes no partition boundary of its own for it. So is a ``Cast`` to the type its input
already has (torch writes ``Cast(to=float)`` of float tensors around softmax and every RMS
normalization of T5 and Llama: eight a layer of a Llama decoding step), where the value types
are known (``values``)."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from typing import TYPE_CHECKING

import numpy as np
import onnx

from ..graph import CONTROL_FLOW
from .folding import NONDETERMINISTIC

if TYPE_CHECKING:
    from ..customop import CustomOp
    from ..graph import Node, ValueInfo

RANDOM = NONDETERMINISTIC | {"Dropout"}
"""Ops whose outputs may differ between two nodes with equal inputs (Dropout: in training mode)."""
DOMAINS = ("", "ai.onnx", "ai.onnx.ml")


def merge_common_subexpressions(nodes: list[Node], constants: dict[str, np.ndarray],
                                graph_outputs: set[str], custom_ops: dict[str, CustomOp],
                                values: dict[str, ValueInfo] | None = None
                                ) -> tuple[list[Node], dict[str, str]]:
    """``nodes`` (topological order) with repeated computations dropped and their readers
    reading the kept node's outputs; and {dropped node name: kept node name}. ``values``: the
    value types, by which a Cast to its input's own type is an Identity."""
    read_by_subgraph = {x for n in nodes if _has_subgraph(n) for x in n.inputs if x}
    renamed: dict[str, str] = {}  # dropped output -> the kept node's output
    seen: dict[tuple, Node] = {}
    const_keys = _constant_keys({x for n in nodes for x in n.inputs if x in constants},
                                constants)
    merged: dict[str, str] = {}
    out: list[Node] = []
    for n in nodes:
        if any(x in renamed for x in n.inputs):
            n = _reading(n, [renamed.get(x, x) for x in n.inputs])
        key = _key(n, constants, const_keys, custom_ops)
        if key is None or any(o in graph_outputs or o in read_by_subgraph for o in n.outputs if o):
            out.append(n)
            continue
        kept = seen.get(key)
        if kept is None or len(kept.outputs) != len(n.outputs):
            seen.setdefault(key, n)
            out.append(n)
            continue
        for mine, theirs in zip(n.outputs, kept.outputs):
            if mine:
                if not theirs:  # the kept node does not make this optional output
                    break
                renamed[mine] = theirs
        else:
            merged[n.name] = kept.name
            continue
        for o in n.outputs:  # not merged after all
            renamed.pop(o, None)
        out.append(n)
    out, dropped = _without_identities(out, graph_outputs, read_by_subgraph, values or {})
    merged.update(dropped)
    return out, merged


def _same_type_cast(n: Node, values: dict[str, ValueInfo]) -> bool:
    """Whether ``n`` is a Cast of a tensor to the type it has."""
    if n.op_type != "Cast" or n.domain not in ("", "ai.onnx") or len(n.inputs) != 1:
        return False
    info = values.get(n.inputs[0])
    if info is None or info.dtype is None or info.kind != "tensor":
        return False
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype)) == n.attrs.get("to")
    except (KeyError, TypeError, ValueError):
        return False


def _without_identities(nodes: list[Node], graph_outputs: set[str], read_by_subgraph: set[str],
                        values: dict[str, ValueInfo]) -> tuple[list[Node], dict[str, str]]:
    """``nodes`` without the Identity nodes whose input another of ``nodes`` makes, and {dropped
    Identity: the node making its input}. Kept: an Identity of a graph input or a constant,
    one whose output a subgraph reads, and one writing a graph output from a value that is a
    graph output too or has other readers."""
    readers: dict[str, int] = {}
    for n in nodes:
        for x in n.inputs:
            if x:
                readers[x] = readers.get(x, 0) + 1
    producer: dict[str, int] = {}  # value -> index in out of the node making it
    renamed: dict[str, str] = {}
    dropped: dict[str, str] = {}
    out: list[Node] = []
    for n in nodes:
        if any(x in renamed for x in n.inputs):
            n = _reading(n, [renamed.get(x, x) for x in n.inputs])
        identity = (n.op_type == "Identity" and n.domain in ("", "ai.onnx")) or \
            _same_type_cast(n, values)
        if identity and len(n.inputs) == 1 and len(n.outputs) == 1 \
                and n.inputs[0] in producer and n.outputs[0] \
                and n.outputs[0] not in read_by_subgraph:
            x, y = n.inputs[0], n.outputs[0]
            p = producer[x]
            if y not in graph_outputs:  # its readers read x
                renamed[y] = x
                readers[x] = readers.get(x, 0) - 1 + readers.get(y, 0)
                dropped[n.name] = out[p].name
                continue
            if x not in graph_outputs and x not in read_by_subgraph and readers.get(x) == 1:
                maker = out[p]  # writes y itself
                out[p] = _writing(maker, [y if o == x else o for o in maker.outputs])
                producer[y] = p
                dropped[n.name] = maker.name
                continue
        for o in n.outputs:
            if o:
                producer[o] = len(out)
        out.append(n)
    return out, dropped


def _key(n: Node, constants: dict, const_keys: dict, custom_ops: dict) -> tuple | None:
    """What makes ``n``'s computation, or None when it must not be merged (a graph attribute
    has no canonical form, so a node with a subgraph has no key)."""
    if n.op_type in RANDOM or n.op_type in custom_ops or n.domain not in DOMAINS:
        return None
    attrs = []
    for k in sorted(n.attrs):
        v = _canonical(n.attrs[k])
        if v is None:
            return None
        attrs.append((k, v))
    ins = []
    for x in n.inputs:
        if x in constants:
            ins.append(const_keys[x])
        else:
            ins.append(("value", x))
    return (n.domain or "", n.op_type, n.opset, tuple(attrs), tuple(ins))


def _constant_keys(names: set[str], constants: dict) -> dict[str, tuple]:
    """A key per constant that is equal only for equal values, without hashing every weight:
    a constant whose dtype and shape no other has, or whose sampled bytes differ from the
    others', is told apart by those; only constants alike in both are digested whole."""
    keys: dict[str, tuple] = {}
    alike: dict[tuple, list[str]] = {}
    for x in sorted(names):
        a = np.asarray(constants[x])
        if a.dtype == object:
            keys[x] = ("const", *_array_key(a))
        else:
            alike.setdefault((a.dtype.str, a.shape), []).append(x)
    for (dt, shape), xs in alike.items():
        samples: dict[bytes, list[str]] = {}
        for x in xs:
            samples.setdefault(_sample(np.asarray(constants[x])), []).append(x)
        for sample, ys in samples.items():
            if len(ys) == 1:
                keys[ys[0]] = ("const", dt, shape, "sampled", sample)
                continue
            for y, first in _equal_to(ys, constants).items():
                keys[y] = ("const", dt, shape, "same bits as", first)
    return keys


def _equal_to(names: list[str], constants: dict) -> dict[str, str]:
    """Each of ``names`` (arrays of one dtype and shape) -> the first of them with the same
    bits. Told apart by a fast hash of their bytes, then compared whole: a digest as strong
    as blake2b's reads the bytes four times slower, and a 64-bit hash alone could collide."""
    buckets: dict[int, list[str]] = {}
    for x in names:
        buckets.setdefault(hash(np.ascontiguousarray(constants[x]).tobytes()), []).append(x)
    first: dict[str, str] = {}
    for xs in buckets.values():
        classes: list[tuple[np.ndarray, str]] = []  # (bytes, first name) per set of equal ones
        for x in xs:
            bits = np.ascontiguousarray(constants[x]).reshape(-1).view(np.uint8)
            for rep, name in classes:
                if np.array_equal(rep, bits):
                    first[x] = name
                    break
            else:
                classes.append((bits, x))
                first[x] = x
    return first


def _sample(a: np.ndarray) -> bytes:
    """Some of an array's bytes (its ends and a stride through it): arrays whose samples
    differ cannot be equal."""
    b = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
    if b.size <= 768:
        return b.tobytes()
    return b[:256].tobytes() + b[-256:].tobytes() + b[::b.size // 256][:256].tobytes()


def _array_key(a: np.ndarray) -> tuple:
    """dtype, shape and the bytes themselves (small) or their digest: equal bits, equal key."""
    if a.dtype == object:  # strings
        data = b"\0".join(str(s).encode("utf-8", "surrogatepass") for s in a.ravel())
        data += struct.pack("<q", a.size)
    else:
        data = np.ascontiguousarray(a).tobytes()
    body = data if len(data) <= 64 else hashlib.blake2b(data, digest_size=32).digest()
    return a.dtype.str, a.shape, len(data), body


def _canonical(v):
    """A hashable form of an attribute value that tells -0.0 from 0.0; None for one that
    cannot be compared (graphs, types, sparse tensors)."""
    if isinstance(v, bool | int | str | bytes):
        return (type(v).__name__, v)
    if isinstance(v, float):
        return ("float", struct.pack("<d", v))
    if isinstance(v, np.ndarray):
        return ("array", *_array_key(v))
    if isinstance(v, np.generic):
        return ("array", *_array_key(np.asarray(v)))
    if isinstance(v, list | tuple):
        items = [_canonical(x) for x in v]
        return None if any(i is None for i in items) else ("list", tuple(items))
    return None


def _has_subgraph(n: Node) -> bool:
    """Control flow, or any node with a graph attribute (``Node.attrs`` keeps them as
    GraphProto, GRAPHS as a list of them)."""
    return n.op_type in CONTROL_FLOW or any(
        isinstance(v, onnx.GraphProto) or (isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto))
        for v in n.attrs.values())


def _reading(n: Node, inputs: list[str]) -> Node:
    """``n`` reading ``inputs`` instead (its proto too, which later stages may rebuild from)."""
    return _rewired(n, "input", inputs)


def _writing(n: Node, outputs: list[str]) -> Node:
    """``n`` writing ``outputs`` instead (its proto too)."""
    return _rewired(n, "output", outputs)


def _rewired(n: Node, side: str, names: list[str]) -> Node:
    proto = None
    if n.proto is not None:
        proto = onnx.NodeProto()
        proto.CopyFrom(n.proto)
        field = getattr(proto, side)
        del field[:]
        field.extend(names)
    return dataclasses.replace(n, **{f"{side}s": list(names)}, proto=proto)
