"""The validation every backend gets: each node of a loaded model is checked before any
backend sees it.

For every node of a domain ONNX has schemas for (``ai.onnx``, ``ai.onnx.ml``, ...):

1. the model's opset of that domain is one this ``onnx`` knows;
2. the node against its schema (``onnx.checker.check_node``): known and required
   attributes of the right types, input and output counts;
3. ONNX shape and type inference of that one node in strict mode, from its inputs' types
   and shapes and the data of small constant inputs: bad axes, perms, ranks, broadcasts,
   mismatched dims fail here;
4. the rules below, for what ONNX's inference leaves out (kernel_shape against the weight,
   pads against the kernel, boolean and enum attributes, reflect pads against the input, ...).

Unknown shapes or dims, and values without a type, are tolerated: what cannot be known at
load time is left to the backends. Nodes of custom domains (no schema) go to their plugins
unchecked. A failure raises :class:`ValidationError` naming the node, the op, the attribute
or input, and how to fix it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import onnx
from onnx import defs, numpy_helper

from ..errors import SPEC_URL, ValidationError, spec_link  # noqa: F401 - named here before
from ..graph import Node, ValueInfo, node_schema, value_info
from ..inference import check_before_inference  # noqa: F401 - named here before

# Constant inputs up to this many elements are handed to ONNX's inference as data (shapes,
# axes, pads); weights are not copied for it.
_DATA_LIMIT = 4096

# Attributes the spec defines as 0/1 flags (onnxruntime reads any non-zero as 1).
BOOLEAN_ATTRIBUTES = {"keepdims", "noop_with_empty_axes", "select_last_index", "transA",
                      "transB", "ceil_mode", "count_include_pad", "exclusive", "reverse",
                      "sorted", "largest", "allowzero", "training_mode", "fmod", "upper"}

# String attributes with a closed set of values: (op types or None for all, attribute, values).
ENUM_ATTRIBUTES = [
    (None, "auto_pad", {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"}),
    ({"Pad"}, "mode", {"constant", "reflect", "edge", "wrap"}),
    ({"Resize", "Upsample"}, "mode", {"nearest", "linear", "cubic", "bilinear", "trilinear"}),
    ({"Resize"}, "coordinate_transformation_mode",
     {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
      "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"}),
    ({"Resize"}, "nearest_mode", {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}),
    ({"Resize"}, "keep_aspect_ratio_policy", {"stretch", "not_larger", "not_smaller"}),
    ({"DepthToSpace"}, "mode", {"DCR", "CRD"}),
    ({"Gelu"}, "approximate", {"none", "tanh"}),
    ({"ScatterElements", "ScatterND", "GatherElements"}, "reduction",
     {"none", "add", "mul", "max", "min"}),
]

_POOLS = {"MaxPool", "AveragePool", "LpPool"}
_GLOBAL_POOLS = {"GlobalMaxPool", "GlobalAveragePool", "GlobalLpPool"}


@functools.cache
def known_opsets() -> dict[str, int]:
    """The newest opset of each ONNX domain this onnx version knows."""
    newest: dict[str, int] = {}
    for s in defs.get_all_schemas_with_history():
        d = s.domain or ""
        newest[d] = max(newest.get(d, 1), s.since_version)
    newest[""] = max(newest.get("", 1), defs.onnx_opset_version())
    # the release table also lists domain versions no op has a since_version of
    _release, _ir, onnx_v, ml_v, training_v = onnx.helper.VERSION_TABLE[-1][:5]
    for domain, v in (("", onnx_v), ("ai.onnx.ml", ml_v), ("ai.onnx.training", training_v)):
        newest[domain] = max(newest.get(domain, 1), v)
    return newest


def validate(model, custom_ops: dict | None = None) -> None:
    """Check every node of ``model`` (a :class:`nnplug.graph.Model`); raises
    :class:`ValidationError` on the first invalid one."""
    custom_ops = custom_ops or {}
    _check_opsets(model.opsets)
    v = _Validator(model, custom_ops)
    for node in model.nodes:
        v.check(node)


def _check_opsets(opsets: dict[str, int]) -> None:
    newest = dict(known_opsets())
    for domain, version in opsets.items():
        d = "" if domain == "ai.onnx" else domain
        if d not in newest:
            continue  # a custom domain: its plugins know its versions
        label = domain or "ai.onnx"
        if not 1 <= version <= newest[d]:
            raise ValidationError(
                f"the model imports opset {version} of domain {label!r}; this onnx "
                f"({onnx.__version__}) knows opsets 1 to {newest[d]} of it. Fix: export the "
                f"model with an opset in that range (or convert it with "
                f"onnx.version_converter), or upgrade onnx if the opset is newer",
                field=f"opset_import {label}")


class _Validator:
    def __init__(self, model, custom_ops):
        self.model = model
        self.custom_ops = custom_ops
        self.ir_version = getattr(model, "ir_version", None) or onnx.IR_VERSION
        self.opset_imports = [onnx.helper.make_opsetid(d, v) for d, v in model.opsets.items()]
        self.ctx = onnx.checker.C.CheckerContext()
        self.ctx.ir_version = self.ir_version
        self.ctx.opset_imports = {("" if d == "ai.onnx" else d): v
                                  for d, v in model.opsets.items()}
        self.types: dict[str, onnx.TypeProto | None] = {}
        self.inferred: dict[str, ValueInfo] = {}
        self.const: dict[str, np.ndarray] = dict(model.constants)
        self._all_types: dict[str, onnx.TypeProto] | None = None

    # -- what a node reads ---------------------------------------------------------------
    def value(self, name: str) -> ValueInfo | None:
        v = self.model.values.get(name)
        if v is None or v.dtype is None or (v.shape is None and name in self.inferred):
            v = self.inferred.get(name, v)
        return v

    def type_of(self, name: str) -> onnx.TypeProto | None:
        if name not in self.types:
            self.types[name] = _type_proto(self.value(name))
        return self.types[name]

    def all_types(self) -> dict[str, onnx.TypeProto]:
        """Every typed value (outer scope of subgraph attributes)."""
        if self._all_types is None:
            names = set(self.model.values) | set(self.inferred)
            self._all_types = {n: t for n in names if (t := self.type_of(n)) is not None}
        return self._all_types

    # -- one node ------------------------------------------------------------------------
    def check(self, node: Node) -> None:
        if node.op_type == "Constant" and "value" in node.attrs and node.outputs:
            value = node.attrs["value"]
            if isinstance(value, np.ndarray):
                self.const[node.outputs[0]] = value
        schema = node_schema(node)
        if schema is None:
            return  # a custom op, or an op no backend will claim: the planner says so
        proto = node.proto or _node_proto(node)
        has_graphs = any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                         for a in proto.attribute)
        # check_node cannot see the outer scope a subgraph reads; inference below checks
        # such nodes' attributes and input counts too
        if not has_graphs:
            try:
                onnx.checker.check_node(proto, self.ctx)
            except Exception as e:  # noqa: BLE001 - onnx raises ValidationError or RuntimeError
                raise _failure(node, _onnx_text(e),
                               "make the node match the op's schema (attribute names and "
                               "types, number of inputs and outputs)") from None
        self._infer(node, schema, proto, has_graphs)
        rules = NodeRules(self, node)
        rules.generic()
        for rule in RULES.get(node.op_type, ()):
            rule(rules)

    def _infer(self, node: Node, schema, proto: onnx.NodeProto, has_graphs: bool) -> None:
        types = {}
        for x in node.inputs:
            if not x:
                continue
            t = self.type_of(x)
            if t is None:
                return  # an input of unknown type: nothing to infer from
            types[x] = t
        if has_graphs:
            types = {**self.all_types(), **types}
        data = {}
        for x in node.inputs:
            arr = self.const.get(x) if x else None
            if arr is not None and arr.size <= _DATA_LIMIT and arr.dtype != object:
                try:
                    data[x] = numpy_helper.from_array(arr, x)
                except Exception:  # noqa: BLE001 - a dtype ONNX cannot hold: no data then
                    pass
        try:
            outs = onnx.shape_inference.infer_node_outputs(
                schema, proto, types, data, opset_imports=self.opset_imports,
                ir_version=self.ir_version)
        except Exception as e:  # noqa: BLE001 - InferenceError, ValidationError, RuntimeError
            raise _failure(node, _onnx_text(e),
                           "correct the attribute or input named above so the node is valid "
                           "for its inputs' shapes and types") from None
        for name, tp in outs.items():
            if name and tp.HasField("tensor_type"):
                vi = onnx.ValueInfoProto(name=name, type=tp)
                self.inferred[name] = value_info(vi)
                self.types.pop(name, None)


def _node_proto(node: Node) -> onnx.NodeProto:
    return onnx.helper.make_node(node.op_type, node.inputs, node.outputs, name=node.name,
                                 domain=node.domain, **node.attrs)


def _type_proto(v: ValueInfo | None) -> onnx.TypeProto | None:
    if v is None or v.dtype is None:
        return None
    try:
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype))
    except Exception:  # noqa: BLE001 - a dtype with no ONNX element type
        return None
    shape = None
    if v.shape is not None:
        shape = [d if isinstance(d, str) or (isinstance(d, int) and d >= 0) else None
                 for d in v.shape]
    return onnx.helper.make_tensor_type_proto(elem, shape)


def _onnx_text(e: Exception) -> str:
    """ONNX's message without its bracketed prefixes and repeated op type."""
    text = str(e).strip()
    for prefix in ("[ShapeInferenceError]", "[TypeInferenceError]", "Inference error(s):"):
        text = text.replace(prefix, "")
    text = " ".join(text.split())
    return text.split("\n")[0][:600]


def _failure(node: Node, what: str, fix: str, *, attribute: str | None = None,
             input: str | None = None) -> ValidationError:
    where = ""
    if attribute is not None:
        where = f" attribute {attribute!r}:"
    elif input is not None:
        where = f" input {input!r}:"
    return ValidationError(
        f"invalid {node.describe()}:{where} {what}. Fix: {fix} "
        f"(spec: {spec_link(node.op_type, node.domain)})",
        node=node.name, op_type=node.op_type, field=attribute or input)


# -- rules ONNX's inference leaves out ------------------------------------------------------
class NodeRules:
    """What a rule sees of one node: attributes, static input shapes, constant inputs."""

    def __init__(self, validator: _Validator, node: Node):
        self.v = validator
        self.node = node

    def attr(self, name: str, default=None):
        return self.node.attrs.get(name, default)

    def input_name(self, i: int) -> str | None:
        ins = self.node.inputs
        return ins[i] if i < len(ins) and ins[i] else None

    def shape(self, i: int) -> tuple | None:
        """Input ``i``'s shape: a tuple of ints (None for unknown dims), or None."""
        name = self.input_name(i)
        v = self.v.value(name) if name else None
        if v is None or v.shape is None:
            return None
        return tuple(d if isinstance(d, int) and d >= 0 else None for d in v.shape)

    def const(self, i: int) -> np.ndarray | None:
        name = self.input_name(i)
        return self.v.const.get(name) if name else None

    def fail(self, what: str, fix: str, *, attribute=None, input=None):
        raise _failure(self.node, what, fix, attribute=attribute, input=input)

    def generic(self) -> None:
        for name in BOOLEAN_ATTRIBUTES & set(self.node.attrs):
            value = self.node.attrs[name]
            if isinstance(value, int) and value not in (0, 1):
                self.fail(f"is {value}; it is a flag and must be 0 or 1",
                          f"set {name} to 0 or 1", attribute=name)
        for ops, name, allowed in ENUM_ATTRIBUTES:
            if (ops is None or self.node.op_type in ops) and name in self.node.attrs:
                value = self.node.attrs[name]
                if isinstance(value, str) and value not in allowed:
                    self.fail(f"is {value!r}; it must be one of {', '.join(sorted(allowed))}",
                              f"use one of the values the spec lists for {name}",
                              attribute=name)


def _spatial(shape):
    return None if shape is None or len(shape) < 3 else shape[2:]


def _conv(r: NodeRules) -> None:
    x, w = r.shape(0), r.shape(1)
    group = r.attr("group", 1)
    if not isinstance(group, int) or group < 1:
        r.fail(f"is {group}; it must be at least 1", "set group to a positive divisor of "
               "the input channels", attribute="group")
    transpose = r.node.op_type == "ConvTranspose"
    ks = r.attr("kernel_shape")
    if ks is not None and w is not None and len(w) >= 3:
        if len(ks) != len(w) - 2 or any(k != d for k, d in zip(ks, w[2:]) if d is not None):
            r.fail(f"is {list(ks)} but the weight {r.input_name(1)!r} has shape "
                   f"{_fmt(w)}, whose kernel dims are {_fmt(w[2:])}",
                   "make kernel_shape equal to the weight's last dims, or drop it (it is "
                   "taken from the weight)", attribute="kernel_shape")
    if not transpose:
        _window_fits(r, list(ks) if ks is not None else None if w is None else list(w[2:]))
    if x is None or w is None or len(x) < 2 or len(w) < 2:
        return
    c, m = x[1], w[0]
    if not transpose:
        if c is not None and w[1] is not None and c != w[1] * group:
            r.fail(f"the input has {c} channels but the weight {r.input_name(1)!r} "
                   f"{_fmt(w)} takes {w[1]} per group x group {group} = {w[1] * group}",
                   "make weight.shape[1] * group equal to the input's channels",
                   attribute="group")
        if m is not None and m % group:
            r.fail(f"the weight's {m} output channels are not divisible by group {group}",
                   "make weight.shape[0] a multiple of group", attribute="group")
        out_c = m
    else:
        if c is not None and m is not None and c != m:
            r.fail(f"the input has {c} channels but the weight {r.input_name(1)!r} "
                   f"{_fmt(w)} expects {m} (weight.shape[0])",
                   "give the weight the input's channel count as its first dim",
                   input=r.input_name(1))
        if c is not None and c % group:
            r.fail(f"the input's {c} channels are not divisible by group {group}",
                   "make the input channels a multiple of group", attribute="group")
        out_c = None if w[1] is None else w[1] * group
    b = r.shape(2)
    if b is not None and out_c is not None and (len(b) != 1 or b[0] not in (None, out_c)):
        r.fail(f"the bias has shape {_fmt(b)}; it must be [{out_c}], one value per output "
               f"channel", f"give the bias shape [{out_c}]", input=r.input_name(2))


def _window_fits(r: NodeRules, kernel) -> None:
    """A window (dilated kernel) larger than the padded input leaves no output: onnxruntime
    refuses it at run time ("Calculated output dimension is negative", "Invalid input shape");
    with static spatial dims it is refused here."""
    spatial = _spatial(r.shape(0))
    auto = r.attr("auto_pad", "NOTSET")
    if not kernel or spatial is None or len(spatial) != len(kernel) or r.attr("ceil_mode", 0) \
            or auto not in ("NOTSET", "VALID"):
        return
    n = len(kernel)
    pads = list(r.attr("pads") or [0] * 2 * n) if auto == "NOTSET" else [0] * 2 * n
    strides = list(r.attr("strides") or [1] * n)
    dil = list(r.attr("dilations") or [1] * n)
    if len(pads) != 2 * n or len(strides) != n or len(dil) != n:
        return  # ONNX's inference reports those
    for i, (size, k) in enumerate(zip(spatial, kernel)):
        if size is None or not isinstance(k, int) or k < 1 or strides[i] < 1 or dil[i] < 1:
            continue
        span = dil[i] * (k - 1) + 1
        padded = size + pads[i] + pads[i + n]
        if padded - span < 0:
            r.fail(f"the window on spatial axis {i} spans {span} (kernel {k}, dilation "
                   f"{dil[i]}) but the input {r.input_name(0)!r} is {size} there, {padded} "
                   f"with its pads; no output fits",
                   "use a smaller kernel or larger pads, or feed a larger input",
                   attribute="kernel_shape")


def _pool(r: NodeRules) -> None:
    ks = r.attr("kernel_shape")
    pads = r.attr("pads")
    if ks and pads and len(pads) == 2 * len(ks):
        for i, k in enumerate(ks):
            if pads[i] >= k or pads[i + len(ks)] >= k:
                r.fail(f"pads {list(pads)} are not all smaller than kernel_shape {list(ks)} "
                       f"(spatial axis {i})",
                       "use pads smaller than the kernel on every axis (a window of only "
                       "padding has no value)", attribute="pads")
    _non_empty_spatial(r)
    _window_fits(r, list(ks) if ks else None)


def _non_empty_spatial(r: NodeRules) -> None:
    x = r.shape(0)
    if x is not None and len(x) >= 3 and x[0] != 0 and 0 in x[1:]:
        r.fail(f"the input has shape {_fmt(x)}; pooling over an empty channel or spatial "
               f"axis has no value (only the batch dim may be 0)",
               "give the input a non-empty spatial extent", input=r.input_name(0))


MAX_BYTES = 2**63 - 1
"""No tensor holds more bytes than an int64 counts (onnxruntime: "Integer overflow")."""


def _constant_of_shape(r: NodeRules) -> None:
    shape = r.const(0)
    if shape is None:
        return
    dims = [int(d) for d in np.asarray(shape).ravel()]
    value = r.attr("value")
    itemsize = np.asarray(value).dtype.itemsize if value is not None else 4
    nbytes = itemsize
    for d in dims:
        nbytes *= max(d, 0)  # Python ints: no overflow; negative dims are ONNX's to report
    if nbytes > MAX_BYTES:
        r.fail(f"shape {dims} asks for {nbytes:,} bytes, more than any memory holds (over "
               f"2**63)", "give a shape whose elements fit in memory", input=r.input_name(0))


def _lrn(r: NodeRules) -> None:
    size = r.attr("size")
    # even sizes are valid (the spec's window is asymmetric then), though onnxruntime
    # refuses them
    if isinstance(size, int) and size < 1:
        r.fail(f"is {size}; it must be at least 1", "use a positive size such as 3 or 5",
               attribute="size")
    x = r.shape(0)
    if isinstance(size, int) and x is not None and len(x) >= 2 and x[1] is not None \
            and size > 2 * x[1] + 1 and size > 2 ** 16:
        r.fail(f"is {size}, far wider than the input's {x[1]} channels",
               f"use a size of at most {2 * x[1] + 1} (any wider window is the same)",
               attribute="size")


def _pad(r: NodeRules) -> None:
    mode = r.attr("mode", "constant")
    if mode not in ("reflect", "edge", "wrap"):
        return
    x = r.shape(0)
    pads = r.attr("pads") if r.node.opset < 11 else r.const(1)
    if x is None or pads is None:
        return
    pads = [int(p) for p in np.asarray(pads).ravel()]
    axes = list(range(len(x)))
    if r.input_name(3):
        a = r.const(3)
        if a is None:
            return
        axes = [int(i) + len(x) if i < 0 else int(i) for i in np.asarray(a).ravel()]
    if len(pads) != 2 * len(axes):
        return  # ONNX's inference reports that
    for j, axis in enumerate(axes):
        d = x[axis] if 0 <= axis < len(x) else None
        if d is None:
            continue
        before, after = pads[j], pads[j + len(axes)]
        if mode == "reflect" and max(before, after) > d - 1:
            r.fail(f"mode 'reflect' pads axis {axis} (size {d}) by {before} before and "
                   f"{after} after; reflection can add at most {max(d - 1, 0)}",
                   "use smaller pads, or mode 'edge' or 'constant'", input="pads")
        if d == 0 and max(before, after) > 0:
            r.fail(f"mode {mode!r} pads axis {axis}, which is empty; there is nothing to "
                   f"repeat", "use mode 'constant' for empty axes", input="pads")


def _reshape(r: NodeRules) -> None:
    x, shape = r.shape(0), r.const(1)
    if shape is None:
        return
    dims = [int(d) for d in np.asarray(shape).ravel()]
    if sum(1 for d in dims if d == -1) > 1 or any(d < -1 for d in dims):
        r.fail(f"shape {dims} may hold one -1 and otherwise sizes >= 0", "fix the shape input",
               input=r.input_name(1))
    if x is None or any(d is None for d in x):
        return
    allowzero = r.attr("allowzero", 0)
    out = [x[i] if d == 0 and not allowzero and i < len(x) else d for i, d in enumerate(dims)]
    total = int(np.prod(x, dtype=np.int64))
    known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
    if (-1 in out and (known == 0 or total % known)) or (-1 not in out and known != total):
        r.fail(f"cannot reshape the input of shape {_fmt(x)} ({total} elements) to {dims}",
               "give a shape with the same number of elements", input=r.input_name(1))


def _transpose(r: NodeRules) -> None:
    perm, x = r.attr("perm"), r.shape(0)
    if perm is not None and x is not None and len(perm) != len(x):
        r.fail(f"is {list(perm)} ({len(perm)} axes) but the input has rank {len(x)}",
               f"list each of the {len(x)} axes once", attribute="perm")


def _gather(r: NodeRules) -> None:
    x, idx = r.shape(0), r.const(1)
    if x is None or idx is None or idx.size == 0:
        return
    axis = r.attr("axis", 0)
    axis = axis + len(x) if axis < 0 else axis
    if not 0 <= axis < len(x) or x[axis] is None:
        return
    d = x[axis]
    bad = idx[(idx < -d) | (idx >= d)]
    if bad.size:
        r.fail(f"index {int(bad.ravel()[0])} is out of range for axis {axis} of size {d}",
               f"use indices in [{-d}, {d - 1}]", input=r.input_name(1))


def _gemm(r: NodeRules) -> None:
    a, b, c = r.shape(0), r.shape(1), r.shape(2)
    if a is None or b is None or c is None or len(a) != 2 or len(b) != 2:
        return
    m = a[1] if r.attr("transA", 0) else a[0]
    n = b[0] if r.attr("transB", 0) else b[1]
    want = (m, n)
    if len(c) > 2 or any(dc not in (None, 1, w) and w is not None
                         for dc, w in zip(reversed(c), reversed(want))):
        r.fail(f"C has shape {_fmt(c)}, which does not broadcast to the result {_fmt(want)}",
               f"give C a shape that broadcasts to {_fmt(want)}", input=r.input_name(2))


def _instance_norm(r: NodeRules) -> None:
    x = r.shape(0)
    if x is None or len(x) < 2 or x[1] is None:
        return
    for i, what in ((1, "scale"), (2, "B")):
        s = r.shape(i)
        if s is not None and (len(s) != 1 or s[0] not in (None, x[1])):
            r.fail(f"{what} has shape {_fmt(s)}; it must be [{x[1]}], one value per channel",
                   f"give {what} shape [{x[1]}]", input=r.input_name(i))


def _depth_space(r: NodeRules) -> None:
    x, b = r.shape(0), r.attr("blocksize")
    if x is None or len(x) != 4 or not isinstance(b, int) or b < 1:
        return
    if r.node.op_type == "DepthToSpace":
        if x[1] is not None and x[1] % (b * b):
            r.fail(f"the input's {x[1]} channels are not divisible by blocksize^2 = {b * b}",
                   "use a blocksize whose square divides the channels", attribute="blocksize")
    else:
        for axis in (2, 3):
            if x[axis] is not None and x[axis] % b:
                r.fail(f"input dim {axis} ({x[axis]}) is not divisible by blocksize {b}",
                       "use a blocksize that divides the height and width",
                       attribute="blocksize")


def _resize(r: NodeRules) -> None:
    scales = r.const(2)
    if scales is not None and scales.size and np.any(~(np.asarray(scales) > 0)):
        r.fail(f"scales {np.asarray(scales).tolist()} must all be positive",
               "use positive scales", input=r.input_name(2))


def _range(r: NodeRules) -> None:
    delta = r.const(2)
    if delta is not None and np.asarray(delta).size == 1:
        d = np.asarray(delta).item()
        if d == 0 or d != d:  # no number of steps reaches the limit (onnxruntime refuses too)
            r.fail(f"delta is {d}; a range needs a non-zero step", "give a non-zero delta",
                   input=r.input_name(2))


def _fmt(shape) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


RULES: dict[str, list[Callable[[NodeRules], None]]] = {
    "Conv": [_conv], "ConvTranspose": [_conv],
    **{op: [_pool] for op in _POOLS},
    **{op: [_non_empty_spatial] for op in _GLOBAL_POOLS},
    "LRN": [_lrn], "Pad": [_pad], "Reshape": [_reshape], "Transpose": [_transpose],
    "Gather": [_gather], "Gemm": [_gemm], "InstanceNormalization": [_instance_norm],
    "DepthToSpace": [_depth_space], "SpaceToDepth": [_depth_space], "Resize": [_resize],
    "ConstantOfShape": [_constant_of_shape], "Range": [_range],
}
"""Checks per op type beyond ONNX's own inference; each raises through ``NodeRules.fail``."""

__all__ = ["validate", "check_before_inference", "known_opsets", "ValidationError", "BOOLEAN_ATTRIBUTES", "RULES"]
