"""The build stage offers a backend's ``fuse`` overlapping runs of a partition, one from each
node on: each node's descriptor is built once and copied into every run that holds it, with
the same content (building each anew made a 2,000-node partition take seconds)."""

from __future__ import annotations

import ctypes

import numpy as np

from nnplug.graph import Node, ValueInfo
from nnplug.native.descs import DescBuilder


def _chain(n: int) -> tuple[list[Node], dict, dict]:
    nodes = [Node(f"add{i}", "Add", "", [f"v{i}", "w"], [f"v{i + 1}"], {"k": i}, 18)
             for i in range(n)]
    values = {f"v{i}": ValueInfo(f"v{i}", np.dtype(np.float32), (2, "batch"))
              for i in range(n + 1)}
    return nodes, values, {"w": np.arange(4, dtype=np.float32).reshape(2, 2)}


def _content(desc) -> tuple:
    def value(v):
        shape = tuple(v.shape[i] for i in range(v.ndim)) if v.ndim > 0 else ()
        return v.name, v.ndim, shape, v.const_data, v.const_nbytes

    attrs = [(desc.attrs[i].name, desc.attrs[i].count,
              _int64_at(desc.attrs[i].data)) for i in range(desc.num_attrs)]
    return (desc.name, desc.op_type, desc.domain, desc.opset, attrs,
            [value(desc.inputs[i]) for i in range(desc.num_inputs)],
            [value(desc.outputs[i]) for i in range(desc.num_outputs)])


def _int64_at(address) -> int:
    return ctypes.c_int64.from_address(address).value


def test_overlapping_runs_build_each_node_descriptor_once():
    nodes, values, constants = _chain(40)
    builder = DescBuilder(values, constants)
    built = []
    original = builder.node
    builder.node = lambda node, out: (built.append(node.name), original(node, out))[1]
    runs = [builder.nodes(nodes[i:i + 8]) for i in range(len(nodes))]  # as _group offers them
    assert sorted(built) == sorted(n.name for n in nodes)  # once each

    fresh = DescBuilder(values, constants)
    for i, run in enumerate(runs):
        for j, node in enumerate(nodes[i:i + 8]):
            want = fresh.nodes([node])[0]
            assert _content(run[j]) == _content(want)
    assert _content(runs[3][0])[5] == [(b"v3", 2, (2, -1), None, 0),
                                      (b"w", 2, (2, 2), constants["w"].ctypes.data, 16)]
