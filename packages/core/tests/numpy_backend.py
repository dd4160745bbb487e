"""A small test-only Python backend with numpy kernels, used by the core's tests.

It is deliberately simple (a few ops, host memory) so the tests exercise the core's
planning, execution and plugin plumbing, not kernel quality.
"""

from __future__ import annotations

import numpy as np

import nnplug
from nnplug import Backend, HostDeviceAPI, Module, Tensor


def _relu(node, x):
    return np.maximum(x, 0)


def _add(node, a, b):
    return a + b


def _mul(node, a, b):
    return a * b


def _matmul(node, a, b):
    return np.matmul(a, b)


def _sigmoid(node, x):
    return (1.0 / (1.0 + np.exp(-x))).astype(x.dtype)


def _reshape(node, x, shape):
    shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape.tolist())]
    return x.reshape(shape)


def _constant_of_shape(node, shape):
    value = node.attrs.get("value")
    value = np.zeros(1, np.float32) if value is None else value
    return np.full(tuple(shape.tolist()), value.reshape(-1)[0], dtype=value.dtype)


def _identity(node, x):
    return x


def _constant(node):
    a = node.attrs
    if "value" in a:
        return np.asarray(a["value"])
    if "value_float" in a or "value_floats" in a:
        return np.asarray(a.get("value_float", a.get("value_floats")), np.float32)
    return np.asarray(a.get("value_int", a.get("value_ints")), np.int64)


KERNELS = {
    "Relu": _relu, "Add": _add, "Mul": _mul, "MatMul": _matmul, "Sigmoid": _sigmoid,
    "Reshape": _reshape, "ConstantOfShape": _constant_of_shape, "Identity": _identity,
}
DEFAULT_OPS = set(KERNELS)
"""What a NumpyBackend() takes unless told; EXTRA_KERNELS are there for tests that ask."""

EXTRA_KERNELS = {
    "Sub": lambda node, a, b: a - b,
    "Div": lambda node, a, b: (a / b).astype(np.result_type(a, b)),
    "Min": lambda node, *xs: np.minimum.reduce(np.broadcast_arrays(*xs)),
    "Max": lambda node, *xs: np.maximum.reduce(np.broadcast_arrays(*xs)),
    "Less": lambda node, a, b: a < b,
    "Greater": lambda node, a, b: a > b,
    "Exp": lambda node, x: np.exp(x),
    "Tanh": lambda node, x: np.tanh(x),
    "Softplus": lambda node, x: np.log1p(np.exp(x)).astype(x.dtype),
    "Where": lambda node, c, a, b: np.where(c, a, b),
    "Equal": lambda node, a, b: a == b,
    "Expand": lambda node, x, shape: x * np.ones(tuple(shape.tolist()), x.dtype),
    "Shape": lambda node, x: np.array(x.shape[node.attrs.get("start", 0):node.attrs.get("end")],
                                      np.int64),
    "Constant": lambda node: _constant(node),
    "Cast": lambda node, x: x.astype(__import__("onnx").helper.tensor_dtype_to_np_dtype(
        node.attrs["to"])),
    "DequantizeLinear": lambda node, x, s, z=None: (
        (x.astype(np.int32) - (0 if z is None else z.astype(np.int32))).astype(np.float32) * s),
}
KERNELS.update(EXTRA_KERNELS)


class NumpyBackend(Backend):
    """Runs the ops in KERNELS on the host; ``ops`` narrows the set for partition tests."""

    id = "numpy"
    device_type = "cpu"

    def __init__(self, ops=None, id=None):
        self.ops = set(DEFAULT_OPS if ops is None else ops)
        if id is not None:
            self.id = id
        self._api = HostDeviceAPI()
        self.builds = []

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        tensors_only = all(graph.value(x).kind not in ("sequence", "optional")
                           for x in [*node.inputs, *node.outputs] if x)
        return node.domain in ("", "ai.onnx") and node.op_type in self.ops and tensors_only

    def build(self, subgraph, target):
        self.builds.append((subgraph, target))
        nodes, consts = subgraph.nodes, subgraph.constants

        def run(inputs):
            env = dict(zip(subgraph.inputs, (t.numpy() for t in inputs)))
            env.update(consts)
            for n in nodes:
                outs = KERNELS[n.op_type](n, *[env[x] for x in n.inputs if x])
                env[n.outputs[0]] = np.asarray(outs)
            return [Tensor.from_numpy(env[o]) for o in subgraph.outputs]

        return Module({"run": run})


class CountingBackend(NumpyBackend):
    """The numpy backend, counting what it is asked (``asked``: node name -> supports calls)."""

    def __init__(self, **kw):
        super().__init__(**kw)
        from collections import Counter

        self.asked: Counter[str] = Counter()

    def supports(self, node, graph):
        self.asked[node.name] += 1
        return super().supports(node, graph)


def make_runtime(*backends, **options):
    """A Runtime that loads nothing installed, with ``backends`` registered."""
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated(**options))
    for b in backends:
        rt.register_backend(b)
    return rt
