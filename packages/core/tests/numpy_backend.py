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


KERNELS = {
    "Relu": _relu, "Add": _add, "Mul": _mul, "MatMul": _matmul, "Sigmoid": _sigmoid,
    "Reshape": _reshape, "ConstantOfShape": _constant_of_shape, "Identity": _identity,
}


class NumpyBackend(Backend):
    """Runs the ops in KERNELS on the host; ``ops`` narrows the set for partition tests."""

    id = "numpy"
    device_type = "cpu"

    def __init__(self, ops=None, id=None):
        self.ops = set(KERNELS if ops is None else ops)
        if id is not None:
            self.id = id
        self._api = HostDeviceAPI()
        self.builds = []

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        return node.domain in ("", "ai.onnx") and node.op_type in self.ops

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


def make_runtime(*backends, **options):
    """A Runtime that loads nothing installed, with ``backends`` registered."""
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated(**options))
    for b in backends:
        rt.register_backend(b)
    return rt
