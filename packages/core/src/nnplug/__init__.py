"""nnplug: a plugin-based ONNX inference runtime.

    import nnplug
    rt = nnplug.Runtime()
    net = rt.load("model.onnx", backends=["cpu"])
    outputs = net.run({"x": array})
"""

from ._version import __version__
from .backend import Backend, Module
from .customop import BoundOp, CustomOp, get_node_attr
from .device import CPU, Device, device, register_device_type
from .device_api import AttrKind, DeviceAPI, HostDeviceAPI
from .errors import (
    BackendError,
    CustomOpError,
    InputError,
    ModelError,
    ModelWarning,
    NnplugError,
    PluginError,
    RegistryError,
    TargetError,
    UnsupportedNodeError,
    ValidationError,
)
from .graph import Node, SubGraph, ValueInfo
from .plugins import BackendInfo, LoadError
from .registry import get_func, list_funcs, register_func, remove_func
from .runtime import CreationOptions, Network, Runtime
from .target import Target, list_target_kinds, register_target_kind
from .tensor import Tensor, from_dlpack


def get_include() -> str:
    """The folder holding nnplug's C headers (``#include <nnplug/backend.h>``)."""
    import os

    return os.path.join(os.path.dirname(__file__), "include")


__all__ = [
    "AttrKind", "Backend", "BackendError", "BackendInfo", "BoundOp", "CPU", "CreationOptions",
    "CustomOp", "CustomOpError", "Device", "DeviceAPI", "HostDeviceAPI", "InputError",
    "LoadError", "ModelError", "ModelWarning", "Module", "Network", "NnplugError", "Node", "PluginError",
    "RegistryError", "Runtime", "SubGraph", "Target", "TargetError", "Tensor",
    "UnsupportedNodeError", "ValidationError", "ValueInfo", "__version__", "device",
    "from_dlpack", "get_func",
    "get_include", "get_node_attr", "list_funcs", "list_target_kinds", "register_device_type",
    "register_func", "register_target_kind", "remove_func",
]
