"""Control flow (If, Loop, Scan) run by the core when no backend claims the node.

Each subgraph becomes a network of its own (a sub-plan, compiled by
:func:`nnplug.pipeline.compile_network` through the same stages, from a Model built of the
subgraph as it is, not read again), placed on the same backends as the main graph (its
nodes appear in ``Network.assignment`` as ``<node>/<attribute>/<node>``); the core runs the
loop or picks the branch and calls the sub-network. Values a subgraph reads from outer
scopes are appended to the node's ``inputs`` by the expand stage
(:func:`nnplug.graph.attach_outer_inputs`, after the formal inputs, as onnxruntime's
implicit inputs), so folding, partitioning and freeing see them; constants among them
become the sub-network's own constants.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from .device import CPU
from .errors import BackendError, ModelError
from .graph import CONTROL_FLOW, Model, Node, SubGraph, ValueInfo, outer_reads, subgraphs
from .plan import Step
from .tensor import HOST_API, Tensor
from .values import TensorSequence, from_host


class ControlFlowOp:
    """A placed If/Loop/Scan node; ``step`` builds its sub-networks and its plan step."""

    label = "core"

    def __init__(self, node: Node, values: dict[str, ValueInfo], model: Model,
                 compile_sub: Callable[[onnx.ModelProto, str], object]):
        self.node = node
        self.values = values
        # what sub-models take from the model (not the model itself: it holds the weights)
        proto = model.proto
        self.opsets = list(proto.opset_import) if proto is not None else [
            helper.make_opsetid(d, v) for d, v in model.opsets.items()]
        self.ir_version = proto.ir_version if proto is not None else onnx.IR_VERSION
        self.functions = list(proto.functions) if proto is not None else []
        self.compile_sub = compile_sub
        self.assignment: dict[str, str] = {}

    def step(self, sg: SubGraph) -> Step:
        node = self.node
        formal = list(node.proto.input)
        nets = {}
        try:
            for attr, g in subgraphs(node.proto):
                sub = self._sub_model(attr, g, sg.constants)
                net = self.compile_sub(sub, f"{node.name}/{attr}")
                nets[attr] = net
                for k, v in net.assignment.items():
                    self.assignment[f"{node.name}/{attr}/{k}"] = v
        except Exception:
            for net in nets.values():
                net.close()
            raise
        consts = {x: Tensor.from_numpy(a) for x, a in sg.constants.items()}
        outer = {x: (consts[x] if x in consts else sg.inputs.index(x))
                 for x in node.inputs if x}
        run_node = {"If": _run_if, "Loop": _run_loop,
                    "Scan": _run_scan if node.opset >= 9 else _run_scan8,
                    "SequenceMap": _run_sequence_map}[node.op_type]
        positions = [node.outputs.index(o) for o in sg.outputs]

        def run(ins: list[Tensor]) -> list[Tensor]:
            env = {x: (s if isinstance(s, Tensor) else ins[s]) for x, s in outer.items()}
            args = [env[x] if x else None for x in formal]
            outs = run_node(node, nets, args, env)
            return [outs[p] for p in positions]

        def close():
            for net in nets.values():
                net.close()

        return Step("core", [node.name], sg.inputs, sg.outputs, CPU, HOST_API, run, close)

    def _sub_model(self, attr: str, g: onnx.GraphProto, constants: dict) -> onnx.ModelProto:
        """``g`` as a model: formal inputs typed from the node's context, the outer values it
        reads as inputs (constants as initializers)."""
        node = self.node
        graph = onnx.GraphProto()
        graph.CopyFrom(g)
        graph.name = f"{node.name}/{attr}"
        for vi, want in zip(graph.input, self._formal_types(g)):
            t = vi.type
            if want is not None and (t.WhichOneof("value") is None
                                     or (t.HasField("tensor_type") and not t.tensor_type.elem_type)):
                t.CopyFrom(want)
        for x in outer_reads(g):
            if x in constants:
                graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(constants[x]), x))
            else:
                graph.input.append(_value_info(x, self.values.get(x)))
        m = helper.make_model(graph, opset_imports=self.opsets, ir_version=self.ir_version)
        m.functions.extend(self.functions)
        return m

    def _formal_types(self, g: onnx.GraphProto) -> list[onnx.TypeProto | None]:
        """Types of a body's formal inputs, from the node's inputs (shapes left out where
        they may change between iterations)."""
        node = self.node
        if node.op_type in ("If", "SequenceMap"):
            return []  # If has no inputs; SequenceMap's body declares its element types
        ins = [self.values.get(x) if x else None for x in node.proto.input]
        if node.op_type == "Loop":
            carried = [_type(v, keep_shape=False) for v in ins[2:]]
            return [_type(ValueInfo("", np.dtype(np.int64), ())),
                    _type(ValueInfo("", np.dtype(np.bool_), ())), *carried]
        n_scan = int(node.attr("num_scan_inputs", 0))
        states = ins[:len(ins) - n_scan]
        scans = ins[len(ins) - n_scan:]
        axes = list(node.attr("scan_input_axes", [0] * n_scan))
        if node.opset < 9:  # Scan-8: sequence_lens first; every value has a batch axis 0
            states = [_unbatched(v) for v in states[1:]]
            scans = [_unbatched(v) for v in scans]
            axes = [0] * n_scan
        sliced = []
        for v, axis in zip(scans, axes):
            if v is None or v.shape is None:
                sliced.append(_type(v, keep_shape=False))
            else:
                axis = axis + len(v.shape) if axis < 0 else axis
                shape = v.shape[:axis] + v.shape[axis + 1:]
                sliced.append(_type(ValueInfo("", v.dtype, shape)))
        return [*[_type(v) for v in states], *sliced]


def _unbatched(v: ValueInfo | None) -> ValueInfo | None:
    """Scan-8's view of a value inside one batch entry: the value without its axis 0."""
    if v is None or v.shape is None or not v.shape:
        return None if v is None else ValueInfo(v.name, v.dtype, None)
    return ValueInfo(v.name, v.dtype, tuple(v.shape[1:]))


def _type(v: ValueInfo | None, keep_shape: bool = True) -> onnx.TypeProto | None:
    if v is None or v.dtype is None:
        return None
    shape = v.shape if keep_shape else None
    if shape is not None:
        shape = [d if d is not None else "" for d in shape]
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(v.dtype), shape)


def _value_info(name: str, v: ValueInfo | None) -> onnx.ValueInfoProto:
    vi = onnx.ValueInfoProto()
    vi.name = name
    t = _type(v)
    if t is not None:
        vi.type.CopyFrom(t)
    return vi


def place_control_flow(node: Node, model: Model, compile_sub) -> ControlFlowOp | None:
    """A ControlFlowOp for ``node`` when the core runs it, else None."""
    if node.op_type not in CONTROL_FLOW or node.domain not in ("", "ai.onnx"):
        return None
    return ControlFlowOp(node, model.values, model, compile_sub)


# -- running ------------------------------------------------------------------------------
def _call(net, inputs: dict[str, Tensor]) -> list[np.ndarray]:
    wanted = {i.name for i in net.inputs}
    out = net.run({k: v for k, v in inputs.items() if k in wanted})
    return [out[o.name] for o in net.outputs]


def _host(t: Tensor | None) -> np.ndarray | None:
    return None if t is None else t.numpy()


def _scalar(t: Tensor, what: str, node: Node):
    a = t.numpy()
    if a.size != 1:
        raise BackendError(f"{node.describe()}: {what} must hold one value, got shape "
                           f"{list(a.shape)}")
    return a.reshape(()).item()


def _run_if(node: Node, nets, args, env) -> list[Tensor]:
    branch = "then_branch" if _scalar(args[0], "the condition", node) else "else_branch"
    return [from_host(a) for a in _call(nets[branch], env)]


def _run_loop(node: Node, nets, args, env) -> list[Tensor]:
    net = nets["body"]
    names = [i.name for i in net.inputs]
    trip = args[0]
    limit = None if trip is None else int(_scalar(trip, "the trip count M", node))
    cond = True if len(args) < 2 or args[1] is None else bool(_scalar(args[1], "cond", node))
    carried = [a for a in args[2:]]
    n_carried = len(carried)
    scans: list[list[np.ndarray]] = []
    i = 0
    while (limit is None or i < limit) and cond:
        feeds = dict(env)
        feeds[names[0]] = Tensor.from_numpy(np.array(i, np.int64))
        feeds[names[1]] = Tensor.from_numpy(np.array(cond, np.bool_))
        for name, v in zip(names[2:2 + n_carried], carried):
            feeds[name] = v
        outs = _call(net, feeds)
        cond = bool(np.asarray(outs[0]).reshape(()).item()) if outs[0].size == 1 else \
            _bad_cond(node, outs[0])
        carried = [from_host(a) for a in outs[1:1 + n_carried]]
        scans.append(outs[1 + n_carried:])
        i += 1
    results = list(carried)
    n_scan = len(net.outputs) - 1 - n_carried
    for k in range(n_scan):
        if scans:
            results.append(Tensor.from_numpy(np.stack([s[k] for s in scans])))
        else:
            results.append(Tensor.from_numpy(_empty_scan(net.outputs[1 + n_carried + k])))
    return results


def _bad_cond(node: Node, a: np.ndarray):
    raise BackendError(f"{node.describe()}: the body's condition output must hold one value, "
                       f"got shape {list(a.shape)}")


def _empty_scan(v: ValueInfo) -> np.ndarray:
    shape = [d if isinstance(d, int) else 0 for d in (v.shape or ())]
    return np.zeros((0, *shape), v.dtype if v.dtype is not None else np.float32)


def _run_scan(node: Node, nets, args, env) -> list[Tensor]:
    net = nets["body"]
    names = [i.name for i in net.inputs]
    n_scan = int(node.attr("num_scan_inputs"))
    n_state = len(node.proto.input) - n_scan
    states = list(args[:n_state])
    xs = [_host(a) for a in args[n_state:]]
    in_axes = [_axis(a, x.ndim) for a, x in zip(node.attr("scan_input_axes", [0] * n_scan), xs)]
    in_dirs = list(node.attr("scan_input_directions", [0] * n_scan))
    lengths = {x.shape[a] for x, a in zip(xs, in_axes)}
    if len(lengths) != 1:
        raise BackendError(f"{node.describe()}: the scan inputs have different lengths "
                           f"{sorted(lengths)} along their scan axes")
    steps = lengths.pop()
    n_out = len(net.outputs) - n_state
    per_step: list[list[np.ndarray]] = []
    for t in range(steps):
        feeds = dict(env)
        for name, v in zip(names[:n_state], states):
            feeds[name] = v
        for name, x, axis, d in zip(names[n_state:], xs, in_axes, in_dirs):
            feeds[name] = Tensor.from_numpy(np.take(x, steps - 1 - t if d else t, axis=axis))
        outs = _call(net, feeds)
        states = [Tensor.from_numpy(a) for a in outs[:n_state]]
        per_step.append(outs[n_state:])
    out_axes = list(node.attr("scan_output_axes", [0] * n_out))
    out_dirs = list(node.attr("scan_output_directions", [0] * n_out))
    results = list(states)
    for k in range(n_out):
        seq = [s[k] for s in per_step]
        if out_dirs[k]:
            seq.reverse()
        if seq:
            stacked = np.stack(seq, axis=_axis(out_axes[k], seq[0].ndim + 1))
        else:
            stacked = _empty_scan(net.outputs[n_state + k])
        results.append(Tensor.from_numpy(stacked))
    return results


def _run_scan8(node: Node, nets, args, env) -> list[Tensor]:
    """Scan-8: the Scan of each batch entry b (axis 0 of every state and scan input) over its
    first sequence_lens[b] steps (axis 1); scan outputs of shorter entries are padded with
    zeros to the longest, as onnxruntime does."""
    net = nets["body"]
    names = [i.name for i in net.inputs]
    n_scan = int(node.attr("num_scan_inputs"))
    n_state = len(node.proto.input) - 1 - n_scan
    if n_state < 0 or n_scan < 1:
        raise ModelError(f"{node.describe()}: Scan-8 takes sequence_lens, the states and "
                         f"{n_scan} scan input(s); it has {len(node.proto.input)} inputs")
    states = [_host(a) for a in args[1:1 + n_state]]
    xs = [_host(a) for a in args[1 + n_state:]]
    dirs = list(node.attr("directions", [0] * n_scan))
    if any(x.ndim < 2 for x in xs):
        raise BackendError(f"{node.describe()}: Scan-8's scan inputs need a batch and a sequence "
                           f"axis, got shapes {[list(x.shape) for x in xs]}")
    batches = {a.shape[0] if a.ndim else None for a in states + xs}
    lengths = {x.shape[1] for x in xs}
    if len(batches) != 1 or None in batches or len(lengths) != 1:
        raise BackendError(f"{node.describe()}: the states and scan inputs must share axis 0 "
                           f"(batch) and the scan inputs axis 1 (sequence), got shapes "
                           f"{[list(a.shape) for a in states + xs]}")
    batch, longest = batches.pop(), lengths.pop()
    lens = [longest] * batch
    if args[0] is not None:
        sl = _host(args[0]).astype(np.int64).reshape(-1)
        if sl.shape != (batch,) or (sl < 0).any() or (sl > longest).any():
            raise BackendError(f"{node.describe()}: sequence_lens must hold {batch} lengths in "
                               f"0..{longest}, got {sl.tolist()}")
        lens = sl.tolist()
    n_out = len(net.outputs) - n_state
    finals: list[list[np.ndarray]] = [[] for _ in range(n_state)]
    scanned: list[list[np.ndarray]] = [[] for _ in range(n_out)]
    for b in range(batch):
        st = [Tensor.from_numpy(np.ascontiguousarray(s[b])) for s in states]
        steps: list[list[np.ndarray]] = []
        for t in range(lens[b]):
            feeds = dict(env)
            for name, v in zip(names[:n_state], st):
                feeds[name] = v
            for name, x, d in zip(names[n_state:], xs, dirs):
                feeds[name] = Tensor.from_numpy(np.ascontiguousarray(x[b, lens[b] - 1 - t if d else t]))
            outs = _call(net, feeds)
            st = [Tensor.from_numpy(a) for a in outs[:n_state]]
            steps.append(outs[n_state:])
        for k, v in enumerate(st):
            finals[k].append(v.numpy())
        for k in range(n_out):
            info = net.outputs[n_state + k]
            if steps:
                seq = np.stack([s[k] for s in steps])
            else:
                seq = _empty_scan(info)
            pad = np.zeros((longest - seq.shape[0], *seq.shape[1:]), seq.dtype)
            scanned[k].append(np.concatenate([seq, pad]))
    results = [Tensor.from_numpy(np.stack(f)) for f in finals]
    results += [Tensor.from_numpy(np.stack(s)) for s in scanned]
    return results


def _run_sequence_map(node: Node, nets, args, env) -> list[Tensor]:
    net = nets["body"]
    names = [i.name for i in net.inputs]
    if not isinstance(args[0], TensorSequence):
        raise BackendError(f"{node.describe()}: input 0 must be a sequence")
    n = len(args[0])
    for k, a in enumerate(args[1:], 1):
        if isinstance(a, TensorSequence) and len(a) != n:
            raise BackendError(f"{node.describe()}: input {k} has {len(a)} tensors, input 0 {n}")
    results: list[list] = [[] for _ in net.outputs]
    for i in range(n):
        feeds = dict(env)
        for name, a in zip(names, args):
            feeds[name] = a.items[i] if isinstance(a, TensorSequence) else a
        for k, out in enumerate(_call(net, feeds)):
            results[k].append(from_host(out))
    return [TensorSequence(r, net.outputs[k].dtype) for k, r in enumerate(results)]


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ModelError(f"scan axis {axis} is out of range for rank {ndim}")
    return axis + ndim if axis < 0 else axis


__all__ = ["outer_reads", "place_control_flow", "ControlFlowOp", "CONTROL_FLOW"]
