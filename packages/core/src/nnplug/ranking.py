"""The default backend order, from what each backend declares.

The core names no backend: a backend declares its ``priority`` and the onnxruntime provider
names it stands for (:class:`nnplug.Backend` attributes, or a native table's ABI 1.5 members),
and every place that needs an order without being given one (``Runtime.load``, a session
without providers, the ONNX backend interface) asks :func:`default_order`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
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
