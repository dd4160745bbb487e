"""Graph rewrites before lowering: fold BatchNormalization into the Conv before it, and fuse
an activation into the Conv/Gemm/MatMul it follows. Both save a pass over the activations."""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np

from nnplug.graph import SubGraph

from .ops.elementwise import activation_of

ACTIVATIONS = ("Relu", "LeakyRelu", "Sigmoid", "Clip")


def rewrite(sg: SubGraph) -> tuple[list, dict]:
    nodes = [copy.copy(n) for n in sg.nodes]
    for n in nodes:
        n.attrs = dict(n.attrs)
    constants = dict(sg.constants)
    uses = Counter(i for n in nodes for i in n.inputs if i)
    uses.update(sg.outputs)
    by_input: dict[str, list] = {}
    for n in nodes:
        for i in n.inputs:
            by_input.setdefault(i, []).append(n)

    def only_consumer(n):
        out = n.outputs[0]
        if len(n.outputs) != 1 or uses[out] != 1:
            return None
        consumers = by_input.get(out, [])
        return consumers[0] if len(consumers) == 1 and consumers[0].inputs[0] == out else None

    removed = set()
    for n in nodes:
        if id(n) in removed or n.op_type != "Conv":
            continue
        bn = only_consumer(n)
        if bn is not None and bn.op_type == "BatchNormalization" and _foldable(n, bn, constants):
            _fold_batchnorm(n, bn, constants)
            removed.add(id(bn))
    nodes = [n for n in nodes if id(n) not in removed]
    by_input = {}
    for n in nodes:
        for i in n.inputs:
            by_input.setdefault(i, []).append(n)

    for n in nodes:
        if id(n) in removed or n.op_type not in ("Conv", "Gemm", "MatMul"):
            continue
        act = only_consumer(n)
        if act is None or act.op_type not in ACTIVATIONS:
            continue
        bounds = [i for i in act.inputs[1:] if i]
        if act.op_type == "Clip" and act.opset >= 11 and any(b not in constants for b in bounds):
            continue
        n.attrs["_act"] = activation_of(act, lambda name: np.asarray(constants[name]))
        n.outputs = [act.outputs[0]]
        removed.add(id(act))
    return [n for n in nodes if id(n) not in removed], constants


def _foldable(conv, bn, constants) -> bool:
    if len([o for o in bn.outputs if o]) != 1 or bn.attr("training_mode", 0):
        return False
    if bn.opset < 9 and bn.attr("spatial", 1) != 1:
        return False
    params = bn.inputs[1:5]
    w = conv.inputs[1]
    b = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    return all(p in constants for p in params) and w in constants and (b is None or b in constants)


def _fold_batchnorm(conv, bn, constants) -> None:
    scale, bias, mean, var = (np.asarray(constants[p], np.float64) for p in bn.inputs[1:5])
    s = scale / np.sqrt(var + float(bn.attr("epsilon", 1e-5)))
    w = np.asarray(constants[conv.inputs[1]], np.float64)
    b = conv.inputs[2] if len(conv.inputs) > 2 and conv.inputs[2] else None
    b = np.asarray(constants[b], np.float64) if b is not None else np.zeros(w.shape[0])
    wname, bname = f"\0{conv.name}/folded_w", f"\0{conv.name}/folded_b"
    constants[wname] = (w * s.reshape((-1,) + (1,) * (w.ndim - 1))).astype(np.float32)
    constants[bname] = ((b - mean) * s + bias).astype(np.float32)
    conv.inputs = [conv.inputs[0], wname, bname]
    conv.outputs = [bn.outputs[0]]
