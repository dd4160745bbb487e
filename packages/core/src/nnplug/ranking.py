"""The default backend order, from what each backend declares.

The core names no backend: a backend declares its ``priority`` and the onnxruntime provider
names it stands for (:class:`nnplug.Backend` attributes, or a native table's ABI 1.5 members),
and every place that needs an order without being given one (``Runtime.load``, a session
without providers, the ONNX backend interface) asks :func:`default_order`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .plugins import BackendInfo

ORDER_ENV_VAR = "NNPLUG_BACKENDS"
"""Comma-separated backend ids: the default order for this process, replacing the declared
one (``CreationOptions.backend_preference`` replaces both)."""

PROVIDER_DEVICE_TYPES = {
    "CPUExecutionProvider": "cpu",
    "CUDAExecutionProvider": "cuda",
    "TensorrtExecutionProvider": "cuda",
    "ROCMExecutionProvider": "rocm",
    "MIGraphXExecutionProvider": "rocm",
    "OpenCLExecutionProvider": "opencl",
    "WebGpuExecutionProvider": "webgpu",
    "VulkanExecutionProvider": "vulkan",
}
"""onnxruntime provider names of a device type: each stands for every backend of that type."""

POLICIES = {
    "default": (),
    "prefer_cpu": ("cpu",),
    "prefer_gpu": ("cuda", "rocm", "opencl", "vulkan", "metal", "webgpu", "oneapi"),
    "prefer_npu": ("hexagon", "maia", "ext_dev", "ext"),
}
"""Device-selection policies (after onnxruntime's EP selection policy and OpenVINO's AUTO):
the device types a policy moves to the front of the declared order, in that order. ``ext``
stands for every extension device type (number 64 and above, NPUs and other accelerators)."""


def declared_rank(info: BackendInfo) -> int:
    return int(getattr(info.backend, "priority", 0) or 0)


def default_order(infos: Iterable[BackendInfo], policy: str = "default") -> list[str]:
    """Backend ids, best first: the policy's device types first, then by declared priority
    (higher first); ties keep registration order."""
    infos = list(infos)
    if policy not in POLICIES:
        raise ValueError(f"unknown device policy {policy!r}; one of {', '.join(POLICIES)}")
    front = POLICIES[policy]

    def device_rank(info) -> int:
        kind = "ext" if _is_extension(info) else info.device_type
        return front.index(kind) if kind in front else len(front)

    ranked = sorted(enumerate(infos),
                    key=lambda ii: (device_rank(ii[1]), -declared_rank(ii[1]), ii[0]))
    return [info.id for _, info in ranked]


def env_order() -> list[str] | None:
    """``NNPLUG_BACKENDS`` as a list of ids, or None when unset or empty."""
    ids = [s.strip() for s in os.environ.get(ORDER_ENV_VAR, "").split(",") if s.strip()]
    return ids or None


def provider_backends(name: str, infos: Iterable[BackendInfo]) -> list[str]:
    """The backends an onnxruntime provider name stands for, best first: those that declare
    the name, and for a device type's name every backend of that type. [] when none."""
    infos = list(infos)
    dtype = PROVIDER_DEVICE_TYPES.get(name)
    wanted = [i for i in infos
              if name in getattr(i.backend, "provider_names", ()) or i.device_type == dtype]
    return default_order(wanted)


def provider_names(info: BackendInfo) -> list[str]:
    """The onnxruntime names a backend answers to: its device type's, then those it declares."""
    names = [p for p, d in PROVIDER_DEVICE_TYPES.items() if d == info.device_type][:1]
    return names + [p for p in getattr(info.backend, "provider_names", ()) if p not in names]


def _is_extension(info: BackendInfo) -> bool:
    from .device import EXTENSION_TYPE_BASE

    number = getattr(info.backend, "device_type_number", 0)
    return isinstance(number, int) and number >= EXTENSION_TYPE_BASE


_CLASS_OF_TYPE = {"cpu": "cpu", "cuda": "gpu", "rocm": "gpu", "opencl": "gpu", "vulkan": "gpu",
                  "metal": "gpu", "webgpu": "gpu", "oneapi": "gpu", "hexagon": "npu",
                  "maia": "accelerator"}
MAX_DEVICES = 64
"""How many device indices :func:`backend_devices` asks each backend about."""


@dataclass(frozen=True)
class BackendDevice:
    """One device a backend can run on (onnxruntime's ``OrtEpDevice``)."""

    backend: str
    device: object
    """The :class:`nnplug.Device` (type and index)."""
    device_class: str
    """"cpu", "gpu", "npu" or "accelerator": the device's answer, else its type's."""
    vendor: str | None
    name: str | None
    provider_names: tuple[str, ...]


def backend_devices(infos: Iterable[BackendInfo], policy: str = "default") -> list[BackendDevice]:
    """Every (backend, device) pair, backends in the default order under ``policy``, devices
    in index order, each with its class, vendor and name as the backend's device API tells."""
    from .device import Device
    from .device_api import AttrKind

    by_id = {i.id: i for i in infos}
    out = []
    for bid in default_order(by_id.values(), policy):
        info = by_id[bid]
        api = info.backend.device_api()
        dtype = info.backend.device_type_number
        for index in range(MAX_DEVICES):
            dev = Device(dtype, index)
            try:
                if not api.get_attr(dev, AttrKind.EXIST):
                    break
                cls = api.get_attr(dev, AttrKind.DEVICE_CLASS)
                vendor = api.get_attr(dev, AttrKind.VENDOR)
                name = api.get_attr(dev, AttrKind.DEVICE_NAME)
            except Exception:  # a device API that cannot answer lists no device
                break
            if cls is None:
                cls = "npu" if _is_extension(info) else _CLASS_OF_TYPE.get(info.device_type,
                                                                          "accelerator")
            if vendor is None and cls == "cpu" and getattr(api, "host_visible", True):
                from .device_api import cpu_vendor

                vendor = cpu_vendor()
            out.append(BackendDevice(bid, dev, str(cls), vendor, name,
                                     tuple(provider_names(info))))
    return out
