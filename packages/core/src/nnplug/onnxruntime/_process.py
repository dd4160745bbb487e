"""Process-wide calls of onnxruntime's module: version, build info, device, logging,
telemetry, seed."""

from __future__ import annotations

import logging
import random

import numpy as np

from .._version import __version__ as nnplug_version

ORT_API_VERSION = "1.32.0"
"""The onnxruntime release whose Python API this module follows (what code that checks
``onnxruntime.__version__`` gates features on)."""

_SEVERITY = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR,
             4: logging.CRITICAL}
_verbosity = 0


def get_version_string() -> str:
    return ORT_API_VERSION


def get_build_info() -> str:
    return (f"ORT Build Info: nnplug {nnplug_version}, onnxruntime API {ORT_API_VERSION}, "
            f"plugin backends")


def get_device() -> str:
    """``"CPU"``, or ``"GPU"`` when a backend of a GPU device type is installed."""
    from ..session import default_runtime

    kinds = {info.device_type for info in default_runtime().backends.values()}
    return "GPU" if kinds & {"cuda", "rocm"} else "CPU"


def set_default_logger_severity(severity: int) -> None:
    """0 verbose ... 4 fatal, for every ``nnplug`` logger."""
    if severity not in _SEVERITY:
        raise ValueError(f"severity {severity!r}: 0 (verbose) to 4 (fatal)")
    logging.getLogger("nnplug").setLevel(_SEVERITY[severity])


def set_default_logger_verbosity(verbosity: int) -> None:
    global _verbosity
    _verbosity = int(verbosity)


def set_default_logger_callback(callback) -> None:
    """``callback(severity, category, logid, code_location, message)`` for nnplug's log."""

    class _Forward(logging.Handler):
        def emit(self, record):
            sev = min(4, max(0, record.levelno // 10 - 1))
            callback(sev, record.name, "", f"{record.pathname}:{record.lineno}",
                     record.getMessage())

    root = logging.getLogger("nnplug")
    for h in [h for h in root.handlers if type(h).__name__ == "_Forward"]:
        root.removeHandler(h)
    if callback is not None:
        root.addHandler(_Forward())


def enable_telemetry_events() -> None:
    """nnplug sends no telemetry: nothing to enable."""


def disable_telemetry_events() -> None:
    """nnplug sends no telemetry: nothing to disable."""


def set_seed(seed: int) -> None:
    """Seeds Python's and numpy's global generators (a backend's random ops seed themselves)."""
    random.seed(seed)
    np.random.seed(seed)


def has_collective_ops() -> bool:
    return False


__all__ = ["ORT_API_VERSION", "disable_telemetry_events", "enable_telemetry_events",
           "get_build_info", "get_device", "get_version_string", "has_collective_ops",
           "set_default_logger_callback", "set_default_logger_severity",
           "set_default_logger_verbosity", "set_seed"]
