"""The ``opencl`` Target kind: attributes filled from the device unless given in the JSON.

    Target('{"kind": "opencl", "device_id": 1, "work_group_size": 32}')
"""

from __future__ import annotations

from nnplug.errors import BackendError, TargetError

# name: (type, default); defaults stand for "ask the device" and are replaced by the canonicalizer.
ATTRS: dict[str, tuple[type, object]] = {
    "device_name": (str, ""),
    "platform_name": (str, ""),
    "driver_version": (str, ""),
    "opencl_version": (str, ""),
    "max_num_threads": (int, 0),
    "max_local_memory": (int, 0),
    "global_memory": (int, 0),
    "compute_units": (int, 0),
    "max_clock_mhz": (int, 0),
    "work_group_size": (int, 0),
    "build_options": (str, ""),
}
"""``max_num_threads``: largest work-group; ``work_group_size``: the 1-D work-group size the
kernels launch with (default min(64, max_num_threads)); ``build_options``: extra OpenCL C
compiler options, e.g. ``-cl-fast-relaxed-math``."""

DEFAULT_WORK_GROUP = 64


def device_attrs(index: int) -> dict:
    from . import devices  # pyopencl: imported when a Target is made, not at Runtime()

    dev = devices.device_for(index)
    return {
        "device_name": dev.name.strip(),
        "platform_name": dev.platform.name.strip(),
        "driver_version": dev.driver_version.strip(),
        "opencl_version": dev.version.strip(),
        "max_num_threads": int(dev.max_work_group_size),
        "max_local_memory": int(dev.local_mem_size),
        "global_memory": int(dev.global_mem_size),
        "compute_units": int(dev.max_compute_units),
        "max_clock_mhz": int(dev.max_clock_frequency),
    }


def canonicalize(attrs: dict, given: set) -> dict:
    try:
        found = device_attrs(attrs["device_id"])
    except BackendError as e:
        raise TargetError(f"target 'opencl': {e}") from None
    out = dict(attrs)
    for name, value in found.items():
        if name not in given:
            out[name] = value
    if out["max_num_threads"] <= 0:
        raise TargetError("target 'opencl': max_num_threads must be positive")
    if "work_group_size" not in given or out["work_group_size"] <= 0:
        out["work_group_size"] = min(DEFAULT_WORK_GROUP, out["max_num_threads"])
    if out["work_group_size"] > out["max_num_threads"]:
        raise TargetError(
            f"target 'opencl': work_group_size {out['work_group_size']} exceeds max_num_threads "
            f"{out['max_num_threads']}; lower it"
        )
    return out


def target_kind_kwargs() -> dict:
    return {"device_type": "opencl", "attrs": dict(ATTRS), "canonicalizer": canonicalize}
