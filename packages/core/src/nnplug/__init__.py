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
    ArgumentTypeError,
    BackendError,
    BackendNotAvailableError,
    CustomOpError,
    InputError,
    InvalidArgumentError,
    ModelError,
    ModelWarning,
    NativeLibraryMissingError,
    NnplugError,
    OptionError,
    PluginError,
    PluginWarning,
    RegistryError,
    RunTerminatedError,
    TargetError,
    TensorExportError,
    UnsupportedNodeError,
    ValidationError,
)
from .graph import Node, SubGraph, ValueInfo
from .headers import get_include
from .network import Network
from .plugin_library import packaged_library
from .plugins import BackendInfo, LoadError
from .registry import get_func, list_funcs, register_func, remove_func
from .runtime import CreationOptions, Runtime
from .session import (
    ExecutionMode,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    RunOptions,
    SessionOptions,
    get_available_providers,
)
from .target import Target, list_target_kinds, register_target_kind
from .tensor import Tensor, from_dlpack

__all__ = [
    "ArgumentTypeError", "AttrKind", "Backend", "BackendError", "BackendInfo", "BackendNotAvailableError", "BoundOp", "CPU",
    "CreationOptions", "CustomOp", "CustomOpError", "Device", "DeviceAPI", "ExecutionMode",
    "GraphOptimizationLevel", "HostDeviceAPI", "IOBinding", "InferenceSession", "InputError",
    "InvalidArgumentError", "LoadError", "ModelError", "ModelMetadata", "ModelWarning", "Module",
    "NativeLibraryMissingError",
    "Network", "NnplugError", "Node", "NodeArg", "OptionError", "PluginError", "PluginWarning",
    "RegistryError",
    "RunOptions", "RunTerminatedError", "Runtime", "SessionOptions", "SubGraph", "Target",
    "TargetError", "Tensor", "TensorExportError", "UnsupportedNodeError", "ValidationError",
    "ValueInfo", "__version__", "device", "from_dlpack", "get_available_providers", "get_func",
    "get_include", "get_node_attr", "list_funcs", "list_target_kinds", "register_device_type",
    "packaged_library",
    "register_func", "register_target_kind", "remove_func",
]
