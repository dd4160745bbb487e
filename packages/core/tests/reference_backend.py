"""A test-only Python backend that runs its partitions with ``onnx.reference``: every standard op,
on the host, with no native backend installed. The core's tests use it where a whole real model
must run (the exported decoders of tests/models)."""

from __future__ import annotations

import numpy as np
from onnx.reference import ReferenceEvaluator

from nnplug import Backend, HostDeviceAPI, Module, Tensor


class ReferenceBackend(Backend):
    id = "reference"
    device_type = "cpu"

    def __init__(self):
        self._api = HostDeviceAPI()

    def device_api(self):
        return self._api

    def supports(self, node, graph):
        return node.domain in ("", "ai.onnx")

    def build(self, subgraph, target):
        ref = ReferenceEvaluator(subgraph.to_model())
        inputs, outputs = list(subgraph.inputs), list(subgraph.outputs)

        def run(tensors):
            res = ref.run(outputs, {n: t.numpy() for n, t in zip(inputs, tensors)})
            # np.array, not np.ascontiguousarray, which makes a 0-d result 1-d
            return [Tensor.from_numpy(np.array(r, order="C")) for r in res]

        return Module({"run": run})
