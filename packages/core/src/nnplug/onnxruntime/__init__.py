"""onnxruntime's Python API over nnplug: code written for onnxruntime runs unchanged with

    import nnplug.onnxruntime as ort

Sessions run on nnplug's installed backends; they answer to onnxruntime's provider names
(``CPUExecutionProvider`` is the best CPU backend installed, ``DnnlExecutionProvider`` the
oneDNN one). Values, errors and submodules (``capi._pybind_state``,
``capi.onnxruntime_pybind11_state``, ``capi.onnxruntime_inference_collection``) are where
onnxruntime code looks for them. What each name does here: docs/coming-from-onnxruntime.md.
"""

from __future__ import annotations

from ._adapters import AdapterFormat, LoraAdapter
from ._devices import (
    OrtAllocatorType,
    OrtArenaCfg,
    OrtDevice,
    OrtDeviceMemoryType,
    OrtDeviceVendorId,
    OrtEpDevice,
    OrtExecutionProviderDevicePolicy,
    OrtHardwareDevice,
    OrtHardwareDeviceType,
    OrtMemoryInfo,
    OrtMemoryInfoDeviceType,
    OrtMemType,
    create_and_register_allocator,
    create_and_register_allocator_v2,
    get_ep_devices,
)
from ._process import (
    ORT_API_VERSION,
    disable_telemetry_events,
    enable_telemetry_events,
    get_build_info,
    get_device,
    get_version_string,
    has_collective_ops,
    set_default_logger_callback,
    set_default_logger_severity,
    set_default_logger_verbosity,
    set_seed,
)
from ._providers import all_providers as get_all_providers
from ._providers import available_providers as get_available_providers
from ._session import (
    ExecutionMode,
    ExecutionOrder,
    GraphOptimizationLevel,
    InferenceSession,
    IOBinding,
    ModelMetadata,
    NodeArg,
    OrtEpAssignedNode,
    OrtEpAssignedSubgraph,
    RunOptions,
    SessionOptions,
)
from ._sparse import OrtSparseFormat, SparseTensor
from ._values import OrtValue, OrtValueVector

__version__ = ORT_API_VERSION

__all__ = [
    "AdapterFormat", "ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "IOBinding",
    "InferenceSession", "LoraAdapter", "ModelMetadata", "NodeArg", "OrtAllocatorType",
    "OrtArenaCfg", "OrtDevice", "OrtDeviceMemoryType", "OrtDeviceVendorId", "OrtEpAssignedNode",
    "OrtEpAssignedSubgraph", "OrtMemType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
    "OrtSparseFormat", "OrtValue", "OrtValueVector", "RunOptions", "SessionOptions",
    "SparseTensor", "create_and_register_allocator", "create_and_register_allocator_v2",
    "disable_telemetry_events", "enable_telemetry_events", "get_all_providers",
    "get_available_providers", "get_build_info", "get_device", "get_version_string",
    "OrtEpDevice", "OrtExecutionProviderDevicePolicy", "OrtHardwareDevice",
    "OrtHardwareDeviceType", "get_ep_devices", "has_collective_ops", "set_default_logger_callback", "set_default_logger_severity",
    "set_default_logger_verbosity", "set_seed",
]
