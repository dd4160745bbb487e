"""The ``opencl`` backend: nnplug's view of this package."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import numpy as np

from nnplug.backend import Backend, Module
from nnplug.errors import BackendError
from nnplug.graph import SubGraph
from nnplug.target import Target

from . import target
from .ops import OPS, why_not
from .rewrite import rewrite

if TYPE_CHECKING:  # pyopencl is imported when a device is first used, not at Runtime()
    from .device_api import OpenCLDeviceAPI

_api: OpenCLDeviceAPI | None = None
_api_lock = threading.Lock()


def shared_device_api() -> OpenCLDeviceAPI:
    global _api
    with _api_lock:
        if _api is None:
            from .device_api import OpenCLDeviceAPI

            _api = OpenCLDeviceAPI()
        return _api


class OpenCLBackend(Backend):
    id = "opencl"
    device_type = "opencl"
    # Below the portable CPU backend: on PoCL (OpenCL on the CPU) it is the slower one; a
    # session that wants the GPU first says so (providers, or the prefer_gpu policy).
    priority = 50

    def device_api(self) -> OpenCLDeviceAPI:
        return shared_device_api()

    def target_kind(self) -> dict:
        return target.target_kind_kwargs()

    def describe(self) -> str:
        from . import devices

        found = devices.visible_devices()
        where = ", ".join(devices.describe(d) for d in found) or "no OpenCL device found"
        return f"backend 'opencl' ({where})"

    def why_not(self, node, graph) -> str | None:
        """None when ``node`` runs here, else why it does not (for logs and tests)."""
        from . import devices

        if not devices.visible_devices():
            return "no OpenCL device (install an OpenCL driver such as pocl-opencl-icd)"
        reason = why_not(node, graph)
        if reason is None:
            reason = _host_input_computed(node, graph)
        return reason

    def supports(self, node, graph) -> bool:
        return self.why_not(node, graph) is None

    def build(self, subgraph: SubGraph, target: Target) -> Module:
        from . import devices
        from .module import CompiledModule

        if target.kind.name != self.target_kind_name:
            raise BackendError(f"opencl: cannot build for target kind {target.kind.name!r}")
        index = target.attrs["device_id"]
        st = devices.state(index)
        nodes, constants = rewrite(subgraph)
        for n in nodes:
            reason = why_not(n, _GraphView(subgraph, constants))
            if reason is not None:
                raise BackendError(f"opencl: cannot run {n.describe()}: {reason}")
        input_dtypes = []
        for name in subgraph.inputs:
            dt = subgraph.value(name).dtype
            if dt is None:
                raise BackendError(f"opencl: the type of input {name!r} of {subgraph.name!r} is unknown")
            input_dtypes.append(np.dtype(dt))
        host_inputs = set()
        produced = {o for n in nodes for o in n.outputs}
        for n in nodes:
            for i in OPS[n.op_type].host_inputs(n):
                name = n.inputs[i]
                if name in constants:
                    continue
                if name in produced:
                    raise BackendError(
                        f"opencl: {n.describe()} needs the value of {name!r} on the host, but it "
                        f"is computed on the device in the same partition; make it a constant"
                    )
                host_inputs.add(subgraph.inputs.index(name))
        module = CompiledModule(
            state=st, device=target.device, api=shared_device_api(), target=target, nodes=nodes,
            inputs=list(subgraph.inputs), input_dtypes=input_dtypes, outputs=list(subgraph.outputs),
            constants=constants, host_inputs=sorted(host_inputs), name=subgraph.name)
        static = [subgraph.value(n).shape for n in subgraph.inputs]
        if not host_inputs and all(s is not None and all(isinstance(d, int) for d in s)
                                   for s in static):
            # plan now: kernels compile and weights upload at load time, not on the first run
            module.plan_for(tuple(tuple(s) for s in static), {})
        return Module({"run": module.run}, close=module.close)

    def close(self) -> None:
        if _api is not None:
            _api.release_workspaces()


def _host_input_computed(node, graph) -> str | None:
    """Inputs the host must read (Reshape's shape, ...) have to be constants or fed by the
    user: one computed by another node may end up computed on the device, which build() could
    not read. Declined here, so the node falls back to another backend instead of failing
    after being claimed."""
    fed = set(getattr(graph, "inputs", ()))
    for i in OPS[node.op_type].host_inputs(node):
        name = node.inputs[i] if i < len(node.inputs) else ""
        if name and name not in graph.constants and name not in fed:
            return (f"input {name!r} is computed by another node, and this op needs its value "
                    f"on the host when it is planned")
    return None


class _GraphView:
    """The subgraph with the rewritten constants, for re-checking rewritten nodes."""

    def __init__(self, sg: SubGraph, constants: dict):
        self.constants = constants
        self._sg = sg

    def value(self, name):
        return self._sg.value(name)
