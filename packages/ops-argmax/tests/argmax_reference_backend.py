"""A small numpy backend with the standard ops around the op under test (what a cpu backend
would run), for the argmax tests."""

import numpy as np

from nnplug import Backend, HostDeviceAPI, Module, Tensor


class ReferenceCpuBackend(Backend):
    """A few standard ops in numpy on the host (what a cpu backend would run)."""

    id = "npref"
    device_type = "cpu"
    KERNELS = {
        "ArgMax": lambda n, x: _argmax(x, n.attrs.get("axis", 0), n.attrs.get("keepdims", 1),
                                       n.attrs.get("select_last_index", 0)),
        "Relu": lambda n, x: np.maximum(x, 0),
        "Softmax": lambda n, x: _softmax(x, n.attrs.get("axis", -1)),
    }

    def __init__(self):
        self._api = HostDeviceAPI()

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        return node.domain in ("", "ai.onnx") and node.op_type in self.KERNELS

    def build(self, subgraph, target):
        def run(inputs):
            env = dict(zip(subgraph.inputs, (t.numpy() for t in inputs)))
            env.update(subgraph.constants)
            for n in subgraph.nodes:
                env[n.outputs[0]] = np.asarray(self.KERNELS[n.op_type](n, env[n.inputs[0]]))
            return [Tensor.from_numpy(env[o]) for o in subgraph.outputs]

        return Module({"run": run})


def _softmax(x, axis):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _argmax(x, axis, keepdims, last):
    if last:
        r = x.shape[axis] - 1 - np.argmax(np.flip(x, axis), axis=axis)
    else:
        r = np.argmax(x, axis=axis)
    return (np.expand_dims(r, axis) if keepdims else r).astype(np.int64)
