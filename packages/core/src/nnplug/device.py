"""Devices: a (device type, index) pair with DLPack's type numbers.

Standard types use DLPack's ``DLDeviceType`` values. Plugins whose device has no
DLPack number take one from the extension range with :func:`register_device_type`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .errors import InvalidArgumentError
from .registry import DEVICE_TYPES

# DLPack's DLDeviceType values (dlpack.h).
_STANDARD_TYPES = {
    "cpu": 1,
    "cuda": 2,
    "cuda_host": 3,
    "opencl": 4,
    "vulkan": 7,
    "metal": 8,
    "vpi": 9,
    "rocm": 10,
    "rocm_host": 11,
    "ext_dev": 12,
    "cuda_managed": 13,
    "oneapi": 14,
    "webgpu": 15,
    "hexagon": 16,
    "maia": 17,
}
EXTENSION_TYPE_BASE = 64
"""Device types handed out to plugins start here, clear of DLPack's own numbers."""

for _name, _number in _STANDARD_TYPES.items():
    DEVICE_TYPES.add(_name, _number, owner="DLPack")
_type_to_name: dict[int, str] = {v: k for k, v in _STANDARD_TYPES.items()}
"""number -> name: an index of :data:`nnplug.registry.DEVICE_TYPES`, kept beside it."""
_lock = threading.Lock()


def _whose(device_type: int) -> str:
    if device_type in _STANDARD_TYPES.values():
        return "DLPack's"
    owner = DEVICE_TYPES.owner_of(_type_to_name.get(device_type, ""))
    return f"registered by {owner}" if owner else "registered earlier"


def register_device_type(name: str, device_type: int | None = None, *,
                         owner: str | None = None) -> int:
    """Map a new device name to a type number (next free extension number by default).

    Registering the same name with the same number again is a no-op; anything that
    would change an existing mapping raises ``InvalidArgumentError`` naming who holds it.
    ``owner`` (a plugin's path or name) is what such errors name for this mapping.
    """
    if not name or not name.replace("_", "").isalnum() or not name.islower():
        raise InvalidArgumentError(f"device type name {name!r} must be lower-case letters, digits and _")
    with _lock:
        held = DEVICE_TYPES.get(name)
        if held is not None:
            if device_type is not None and held != device_type:
                raise InvalidArgumentError(
                    f"device type {name!r} is already number {held} ({_whose(held)}), "
                    f"not {device_type}"
                )
            return held
        if device_type is None:
            device_type = max([EXTENSION_TYPE_BASE - 1, *_type_to_name]) + 1
        elif device_type in _type_to_name:
            raise InvalidArgumentError(
                f"device type number {device_type} already belongs to "
                f"{_type_to_name[device_type]!r} ({_whose(device_type)})"
            )
        DEVICE_TYPES.add(name, device_type, owner=owner)
        _type_to_name[device_type] = name
        return device_type


def is_standard_type(device_type: int) -> bool:
    """Whether ``device_type`` is one of DLPack's own numbers."""
    return device_type in _STANDARD_TYPES.values()


def device_type_of(name_or_type: str | int) -> int:
    if isinstance(name_or_type, int):
        if name_or_type not in _type_to_name:
            raise InvalidArgumentError(f"unknown device type number {name_or_type}")
        return name_or_type
    number = DEVICE_TYPES.get(name_or_type)
    if number is None:
        raise InvalidArgumentError(
            f"unknown device type {name_or_type!r}; known: {', '.join(DEVICE_TYPES.names())}")
    return number


def device_type_name(device_type: int) -> str:
    return _type_to_name.get(device_type, f"ext{device_type}")


@dataclass(frozen=True)
class Device:
    """A device: DLPack type number and index. Hashable, comparable."""

    device_type: int
    index: int = 0

    @property
    def type_name(self) -> str:
        return device_type_name(self.device_type)

    def __str__(self) -> str:
        return f"{self.type_name}:{self.index}"

    def __repr__(self) -> str:
        return f"nnplug.device({str(self)!r})"

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, self.index)


def device(spec: str | int | Device, index: int | None = None) -> Device:
    """``device("opencl", 0)``, ``device("opencl:0")``, ``device(4, 0)`` or a Device."""
    if isinstance(spec, Device):
        if index is not None and index != spec.index:
            raise InvalidArgumentError(f"device({spec!r}, {index}): the index is given twice")
        return spec
    if isinstance(spec, str) and ":" in spec:
        if index is not None:
            raise InvalidArgumentError(f"device({spec!r}, {index}): the index is given twice")
        name, _, idx = spec.partition(":")
        try:
            index = int(idx)
        except ValueError:
            raise InvalidArgumentError(f"device {spec!r}: the index after ':' must be an integer") from None
        spec = name
    index = 0 if index is None else index
    if not isinstance(index, int) or index < 0:
        raise InvalidArgumentError(f"device index must be a non-negative integer, not {index!r}")
    return Device(device_type_of(spec), index)


CPU = Device(1, 0)
