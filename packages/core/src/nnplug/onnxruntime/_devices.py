"""onnxruntime's device and memory descriptions: ``OrtDevice``, ``OrtMemoryInfo``,
``OrtArenaCfg`` and their enums, and the allocator registration calls. nnplug's backends
plan and allocate their own memory: these describe, they do not allocate."""

from __future__ import annotations

import enum
import logging

from ._errors import OrtRuntimeError

log = logging.getLogger("nnplug.onnxruntime")


class OrtAllocatorType(enum.IntEnum):
    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtMemType(enum.IntEnum):
    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtDeviceMemoryType(enum.IntEnum):
    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceVendorId(enum.IntEnum):
    NONE = 0
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


_DEVICE_TYPES = {"cpu": 0, "cuda": 1, "gpu": 1, "dml": 1, "rocm": 1, "opencl": 1, "fpga": 2,
                 "npu": 3, "cann": 3, "qnn": 3}
"""Device names -> onnxruntime's OrtDevice type numbers (CPU 0, GPU 1, FPGA 2, NPU 3)."""


class OrtDevice:
    """A device as onnxruntime numbers it. ``name`` keeps the device name given (``"cpu"``,
    ``"cuda"``, or an nnplug device type such as ``"opencl"``)."""

    def __init__(self, device_type: int = 0, mem_type: int = 0, device_id: int = 0,
                 vendor_id: int = 0, name: str | None = None):
        self._type, self._mem, self._id, self._vendor = (int(device_type), int(mem_type),
                                                         int(device_id), int(vendor_id))
        self.name = name or {0: "cpu", 1: "gpu", 2: "fpga", 3: "npu"}.get(self._type, "cpu")

    @staticmethod
    def make(device_type: str, device_id: int = 0, vendor_id: int = -1) -> OrtDevice:
        name = str(device_type).lower()
        if name not in _DEVICE_TYPES:
            raise OrtRuntimeError(f"Unsupported device type: {device_type}")
        vendor = 0 if vendor_id in (-1, None) else int(vendor_id)
        if name == "cuda" and vendor_id in (-1, None):
            vendor = OrtDeviceVendorId.NVIDIA
        return OrtDevice(_DEVICE_TYPES[name], 0, device_id, vendor, name)

    @staticmethod
    def cpu() -> int:
        return 0

    @staticmethod
    def cuda() -> int:
        return 1

    @staticmethod
    def fpga() -> int:
        return 2

    @staticmethod
    def npu() -> int:
        return 3

    @staticmethod
    def default_memory() -> int:
        return 0

    def device_id(self) -> int:
        return self._id

    def device_type(self) -> int:
        return self._type

    def device_vendor_id(self) -> int:
        return self._vendor

    def device_mem_type(self) -> int:
        return self._mem

    def __eq__(self, other):
        return isinstance(other, OrtDevice) and (self._type, self._mem, self._id, self._vendor) \
            == (other._type, other._mem, other._id, other._vendor)

    def __hash__(self):
        return hash((self._type, self._mem, self._id, self._vendor))

    def __repr__(self):
        return f"OrtDevice({self.name}:{self._id})"


class OrtMemoryInfo:
    """onnxruntime's memory description (name, allocator, device, memory type)."""

    def __init__(self, name: str, allocator_type=OrtAllocatorType.ORT_ARENA_ALLOCATOR,
                 device_id: int = 0, mem_type=OrtMemType.DEFAULT):
        self.name = str(name)
        self.allocator_type = OrtAllocatorType(allocator_type)
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(mem_type)
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = 0
        self.device_type = OrtMemoryInfoDeviceType.CPU if self.name.lower().startswith("cpu") \
            else OrtMemoryInfoDeviceType.GPU
        self.alignment = 0

    @staticmethod
    def create_v2(name: str, device_type, vendor_id: int, device_id: int, device_mem_type,
                  alignment: int, allocator_type) -> OrtMemoryInfo:
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_type = OrtMemoryInfoDeviceType(device_type)
        info.device_vendor_id = int(vendor_id)
        info.device_mem_type = OrtDeviceMemoryType(device_mem_type)
        info.alignment = int(alignment)
        return info

    def __repr__(self):
        return (f"OrtMemoryInfo(name={self.name!r}, device_id={self.device_id}, "
                f"mem_type={self.mem_type.name}, allocator_type={self.allocator_type.name})")


def memory_info_of(device_type_name: str, device_id: int = 0) -> OrtMemoryInfo:
    """Where a backend of this device type keeps a session's inputs and outputs."""
    if device_type_name == "cpu":
        return OrtMemoryInfo("Cpu", OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, OrtMemType.DEFAULT)
    info = OrtMemoryInfo(device_type_name.capitalize(), OrtAllocatorType.ORT_DEVICE_ALLOCATOR,
                         device_id, OrtMemType.DEFAULT)
    info.device_type = OrtMemoryInfoDeviceType.GPU
    return info


_ARENA_KEYS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes",
               "max_dead_bytes_per_chunk", "initial_growth_chunk_size_bytes",
               "max_power_of_two_extend_bytes")


class OrtArenaCfg:
    """An arena configuration: ``OrtArenaCfg(max_mem, arena_extend_strategy,
    initial_chunk_size_bytes, max_dead_bytes_per_chunk)`` or ``OrtArenaCfg({key: value})``.
    Kept for code that passes one; nnplug's backends size their own memory."""

    def __init__(self, *args):
        values = dict.fromkeys(_ARENA_KEYS, -1)
        if len(args) == 1 and isinstance(args[0], dict):
            for key, value in args[0].items():
                if key not in _ARENA_KEYS:
                    raise OrtRuntimeError(f"Invalid OrtArenaCfg option: {key}")
                values[key] = int(value)
        elif len(args) == 4:
            values.update(zip(_ARENA_KEYS, (int(a) for a in args)))
        elif args:
            raise TypeError("OrtArenaCfg takes (max_mem, arena_extend_strategy, "
                            "initial_chunk_size_bytes, max_dead_bytes_per_chunk) or a dict")
        for key, value in values.items():
            setattr(self, key, value)


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None = None):
    """Accepted: sessions with ``session.use_env_allocators`` run as without it (nnplug's
    backends plan memory per network)."""
    log.info("create_and_register_allocator(%r): nnplug's backends allocate their own memory",
             mem_info)


def create_and_register_allocator_v2(provider_type: str, mem_info: OrtMemoryInfo,
                                     provider_options: dict, arena_cfg: OrtArenaCfg | None = None):
    """As :func:`create_and_register_allocator`, for a provider (CPU only here)."""
    if provider_type != "CPUExecutionProvider":
        raise OrtRuntimeError(f"create_and_register_allocator_v2: provider {provider_type!r} is "
                              f"not available")
    create_and_register_allocator(mem_info, arena_cfg)


__all__ = ["OrtAllocatorType", "OrtArenaCfg", "OrtDevice", "OrtDeviceMemoryType",
           "OrtDeviceVendorId", "OrtMemType", "OrtMemoryInfo", "OrtMemoryInfoDeviceType",
           "create_and_register_allocator", "create_and_register_allocator_v2",
           "memory_info_of"]


# -- devices and the provider selection policy (onnxruntime's plugin-EP API) ---------------------
class OrtHardwareDeviceType(enum.IntEnum):
    CPU = 0
    GPU = 1
    NPU = 2


class OrtExecutionProviderDevicePolicy(enum.IntEnum):
    DEFAULT = 0
    PREFER_CPU = 1
    PREFER_NPU = 2
    PREFER_GPU = 3
    MAX_PERFORMANCE = 4
    MAX_EFFICIENCY = 5
    MIN_OVERALL_POWER = 6


DEVICE_POLICIES = {OrtExecutionProviderDevicePolicy.DEFAULT: "default",
                   OrtExecutionProviderDevicePolicy.PREFER_CPU: "prefer_cpu",
                   OrtExecutionProviderDevicePolicy.PREFER_NPU: "prefer_npu",
                   OrtExecutionProviderDevicePolicy.PREFER_GPU: "prefer_gpu",
                   # nnplug ranks by what backends declare: the fastest first
                   OrtExecutionProviderDevicePolicy.MAX_PERFORMANCE: "default",
                   OrtExecutionProviderDevicePolicy.MAX_EFFICIENCY: "prefer_npu",
                   OrtExecutionProviderDevicePolicy.MIN_OVERALL_POWER: "prefer_npu"}
"""onnxruntime's policies as nnplug's device policies (``SessionOptions.device_policy``)."""

_HARDWARE_TYPES = {"cpu": OrtHardwareDeviceType.CPU, "gpu": OrtHardwareDeviceType.GPU,
                   "npu": OrtHardwareDeviceType.NPU, "accelerator": OrtHardwareDeviceType.NPU}


class OrtHardwareDevice:
    """A device as a backend's device API describes it."""

    def __init__(self, device_type: OrtHardwareDeviceType, vendor: str, device_id: int,
                 metadata: dict[str, str]):
        self.type, self.vendor, self.device_id, self.metadata = (device_type, vendor,
                                                                  device_id, metadata)
        self.vendor_id = 0  # PCI vendor ids are not known to nnplug's device APIs

    def __repr__(self) -> str:
        return f"OrtHardwareDevice({self.type.name}, {self.vendor!r}, {self.device_id})"


class OrtEpDevice:
    """A (provider, device) pair: nnplug's (backend, device), named as onnxruntime names it."""

    def __init__(self, ep_name: str, device: OrtHardwareDevice, backend: str):
        self.ep_name, self.device, self.ep_vendor = ep_name, device, "nnplug"
        self.ep_metadata = {"nnplug_backend": backend}
        self.ep_options: dict[str, str] = {}

    def __repr__(self) -> str:
        return f"OrtEpDevice({self.ep_name!r}, {self.device!r})"


def get_ep_devices(runtime=None) -> list[OrtEpDevice]:
    """Every (backend, device) pair, best first (``nnplug.Runtime.devices``)."""
    from ..runtime import default_runtime
    from ._providers import provider_name

    runtime = runtime or default_runtime()
    out = []
    for d in runtime.devices():
        hw = OrtHardwareDevice(_HARDWARE_TYPES.get(d.device_class, OrtHardwareDeviceType.NPU),
                               d.vendor or "", d.device.index,
                               {"name": d.name or "", "nnplug_device": str(d.device)})
        out.append(OrtEpDevice(provider_name(runtime, d.backend), hw, d.backend))
    return out
