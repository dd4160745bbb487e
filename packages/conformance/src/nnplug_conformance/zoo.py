"""Helpers for testing against ONNX's light model zoo, shared by plugin tests and the proof
tools (tools/differential.py): its weights are in-graph ConstantOfShape fills, which hide
bugs (every channel equal), so tests replace them by random values."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """The zoo's weights are ConstantOfShape fills: replace each by random values of its
    shape (He-scaled for Conv/Gemm kernels, the fill value times U(0.5, 1.5) otherwise),
    and scale every other float initializer by U(0.5, 1.5) (signs, hence positive
    variances, kept)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    kernel_of = {n.input[1]: n for n in g.node
                 if n.op_type in ("Conv", "Gemm") and len(n.input) > 1}
    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in inits[node.input[0]]]
            value = 0.0
            for a in node.attribute:
                if a.name == "value":
                    value = float(numpy_helper.to_array(a.t).ravel()[0])
            if node.output[0] in kernel_of:
                user = kernel_of[node.output[0]]
                trans_b = any(a.name == "transB" and a.i for a in user.attribute)
                fan_in = int(np.prod(shape[1:])) if user.op_type == "Conv" or trans_b else shape[0]
                arr = rng.normal(0.0, np.sqrt(2.0 / max(fan_in, 1)), shape)
            else:
                arr = value * rng.uniform(0.5, 1.5, shape) if value else rng.normal(0, 0.1, shape)
            g.initializer.append(numpy_helper.from_array(arr.astype(np.float32), node.output[0]))
            if m.ir_version < 4:  # initializers must also be graph inputs there
                g.input.append(onnx.helper.make_tensor_value_info(
                    node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    for i, init in enumerate(g.initializer):  # shipped float weights: scaled, signs kept
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size > 1 and init.name not in kernel_of:
            new = (arr * rng.uniform(0.5, 1.5, arr.shape)).astype(np.float32)
            g.initializer[i].CopyFrom(numpy_helper.from_array(new, init.name))
    return m
