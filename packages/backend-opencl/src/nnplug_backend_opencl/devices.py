"""Which OpenCL devices nnplug sees, and the per-device state it shares (context, queue).

``opencl:<i>`` is the i-th *visible* device. By default every device of every platform is
visible, in platform order. ``NNPLUG_OPENCL_DEVICE`` narrows and reorders them, like
``CUDA_VISIBLE_DEVICES``: a comma-separated list of selectors, each one of

- ``3``: the fourth device in the list of all devices (``nnplug-opencl-devices`` order),
- ``1:0``: platform 1, device 0,
- any other text: the first device whose platform name, platform vendor or device name
  contains it (case-insensitive), e.g. ``pocl``, ``nvidia`` or ``intel``.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

import pyopencl as cl

from nnplug.errors import BackendError

ENV_DEVICE = "NNPLUG_OPENCL_DEVICE"

_lock = threading.RLock()
_all: list[tuple[int, int, cl.Device]] | None = None
_states: dict[int, DeviceState] = {}


def all_devices() -> list[tuple[int, int, cl.Device]]:
    """(platform index, device index, device) for every OpenCL device; [] without a platform."""
    global _all
    with _lock:
        if _all is None:
            found = []
            try:
                platforms = cl.get_platforms()
            except cl.Error:  # the ICD loader reports "no platform" as an error
                platforms = []
            for pi, p in enumerate(platforms):
                try:
                    devices = p.get_devices()
                except cl.Error:
                    devices = []
                found += [(pi, di, d) for di, d in enumerate(devices)]
            _all = found
        return list(_all)


def describe(dev: cl.Device) -> str:
    return f"{dev.platform.name.strip()} / {dev.name.strip()}"


def _select(selector: str, devices: list[tuple[int, int, cl.Device]]) -> cl.Device:
    s = selector.strip()
    listing = "; ".join(f"{i}: {describe(d)}" for i, (_, _, d) in enumerate(devices)) or "none"
    if s.isdigit():
        i = int(s)
        if i < len(devices):
            return devices[i][2]
    elif ":" in s and all(part.isdigit() for part in s.split(":", 1)):
        pi, di = (int(part) for part in s.split(":", 1))
        for p, d, dev in devices:
            if (p, d) == (pi, di):
                return dev
    else:
        for _, _, dev in devices:
            text = f"{describe(dev)} {dev.platform.vendor}".lower()
            if s.lower() in text:
                return dev
    raise BackendError(
        f"{ENV_DEVICE}={os.environ.get(ENV_DEVICE)!r}: selector {s!r} matches no OpenCL device; "
        f"devices: {listing}. Use an index, 'platform:device' or part of a device name"
    )


def visible_devices() -> list[cl.Device]:
    devices = all_devices()
    spec = os.environ.get(ENV_DEVICE, "").strip()
    if not spec:
        return [d for _, _, d in devices]
    return [_select(s, devices) for s in spec.split(",") if s.strip()]


def device_for(index: int) -> cl.Device:
    devices = visible_devices()
    if not 0 <= index < len(devices):
        listing = "; ".join(f"opencl:{i} = {describe(d)}" for i, d in enumerate(devices))
        raise BackendError(
            f"no OpenCL device opencl:{index}; visible devices: {listing or 'none'}. "
            + ("Install an OpenCL driver (e.g. Debian's pocl-opencl-icd) and the ICD loader"
               if not devices else f"Pick another index or set {ENV_DEVICE}")
        )
    return devices[index]


@dataclass
class DeviceState:
    """One context per physical device, shared by every module and the device API."""

    device: cl.Device
    context: cl.Context
    queue: cl.CommandQueue
    """The default queue (stream ``None``)."""
    programs: dict = field(default_factory=dict)
    build_lock: threading.Lock = field(default_factory=threading.Lock)


def state_for(dev: cl.Device) -> DeviceState:
    key = dev.int_ptr
    with _lock:
        st = _states.get(key)
        if st is None:
            ctx = cl.Context([dev])
            st = DeviceState(dev, ctx, cl.CommandQueue(ctx, dev))
            _states[key] = st
        return st


def state(index: int) -> DeviceState:
    return state_for(device_for(index))
