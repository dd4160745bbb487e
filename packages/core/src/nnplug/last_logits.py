"""A decoder whose ``logits`` output holds only the last position: [batch, 1, vocab].

A decoding loop reads the logits of each row's last position only, but a model in optimum's
cache layout projects every position onto the vocabulary: on the prompt that is the largest
product of the step (16 positions times a 256 x 50257 weight for a small GPT-2). The model
this module writes slices the hidden states to the last position right before that final
projection, so the prompt costs about one step's projection; every other output (the
presents) is unchanged.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from .errors import ModelError

LOGITS = "logits"
# nodes allowed between the final projection and the logits output: per-position ops
_PER_POSITION = {"Add", "Mul", "Div", "Cast", "Identity", "Softcap", "Tanh"}


def last_position_logits(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose ``logits`` is [batch, 1, vocab], the last position's. The
    final projection (the MatMul producing ``logits``, through per-position ops such as a
    bias Add) reads its hidden states sliced to the last position. ModelError when the model
    has no such projection onto a ``logits`` output of rank 3."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    out = next((o for o in g.output if o.name == LOGITS), None)
    if out is None:
        raise ModelError(f"last_position_logits: the model has no output {LOGITS!r}")
    dims = out.type.tensor_type.shape.dim
    if out.type.tensor_type.HasField("shape") and len(dims) != 3:
        raise ModelError(f"last_position_logits: output {LOGITS!r} has rank {len(dims)}; the "
                         f"layout's logits are [batch, seq, vocab]")
    producer = {o: n for n in g.node for o in n.output}
    path, value = [], LOGITS
    while value in producer and producer[value].op_type in _PER_POSITION:
        node = producer[value]
        path.append(node)
        value = _per_position_input(node, producer, g)
        if value is None:
            break
    proj = producer.get(value) if value is not None else None
    if proj is None or proj.op_type != "MatMul":
        raise ModelError(f"last_position_logits: no MatMul projects the hidden states onto "
                         f"{LOGITS!r} (found {proj.op_type if proj else 'no node'} there); "
                         f"the model's logits cannot be sliced")
    hidden = proj.input[0]
    sliced = hidden + "/last_position"
    consts = {"starts": [-1], "ends": [np.iinfo(np.int64).max], "axes": [1]}
    for name, v in consts.items():
        g.initializer.append(numpy_helper.from_array(np.array(v, np.int64),
                                                     f"{sliced}/{name}"))
    slice_node = helper.make_node("Slice", [hidden, *(f"{sliced}/{k}" for k in consts)],
                                  [sliced], name=f"{sliced}/Slice")
    proj.input[0] = sliced
    at = list(g.node).index(proj)
    g.node.insert(at, slice_node)
    # what was inferred of the values from the projection on has the old sequence length
    stale = {o for n in [proj, *path] for o in n.output}
    keep = [vi for vi in g.value_info if vi.name not in stale]
    del g.value_info[:]
    g.value_info.extend(keep)
    if len(dims) == 3:
        dims[1].Clear()
        dims[1].dim_value = 1
    return m


def _per_position_input(node, producer, g) -> str | None:
    """The input of a per-position node that carries the positions (the others are constants
    or scalars of the graph)."""
    consts = {i.name for i in g.initializer}
    consts.update(o for n in g.node if n.op_type == "Constant" for o in n.output)
    moving = [i for i in node.input if i and i not in consts and i in producer]
    return moving[0] if len(moving) == 1 else None


__all__ = ["last_position_logits"]
