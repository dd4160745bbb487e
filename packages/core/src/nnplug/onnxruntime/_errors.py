"""onnxruntime's exception classes (``onnxruntime.capi.onnxruntime_pybind11_state.Fail``...)
and the translation of nnplug's errors into them at the compat API's edge.

onnxruntime's classes derive from ``Exception`` only; these derive from
:class:`nnplug.NnplugError` too, so code catching either keeps working. Their text is
onnxruntime's: ``[ONNXRuntimeError] : <code> : <STATUS> : <nnplug's message>``.
"""

from __future__ import annotations

import functools

from ..errors import (
    InputError,
    InvalidArgumentError,
    ModelError,
    NnplugError,
    PluginError,
    RunTerminatedError,
    TargetError,
    UnsupportedNodeError,
    ValidationError,
)


class OrtError(NnplugError):
    """Base of the onnxruntime status exceptions."""

    code = 1
    status = "FAIL"

    def __init__(self, message: str = ""):
        super().__init__(f"[ONNXRuntimeError] : {self.code} : {self.status} : {message}")


def _status(name: str, code: int, status: str) -> type:
    return type(name, (OrtError,), {"code": code, "status": status, "__module__": __name__})


Fail = _status("Fail", 1, "FAIL")
InvalidArgument = _status("InvalidArgument", 2, "INVALID_ARGUMENT")
NoSuchFile = _status("NoSuchFile", 3, "NO_SUCHFILE")
NoModel = _status("NoModel", 4, "NO_MODEL")
EngineError = _status("EngineError", 5, "ENGINE_ERROR")
RuntimeException = _status("RuntimeException", 6, "RUNTIME_EXCEPTION")
InvalidProtobuf = _status("InvalidProtobuf", 7, "INVALID_PROTOBUF")
ModelLoaded = _status("ModelLoaded", 8, "MODEL_LOADED")
NotImplemented = _status("NotImplemented", 9, "NOT_IMPLEMENTED")  # noqa: A001 - onnxruntime's name
InvalidGraph = _status("InvalidGraph", 10, "INVALID_GRAPH")
EPFail = _status("EPFail", 11, "EP_FAIL")
ModelLoadCanceled = _status("ModelLoadCanceled", 12, "MODEL_LOAD_CANCELED")
ModelRequiresCompilation = _status("ModelRequiresCompilation", 13, "MODEL_REQUIRES_COMPILATION")
NotFound = _status("NotFound", 14, "NOT_FOUND")
DeviceReset = _status("DeviceReset", 15, "DEVICE_RESET")

EXCEPTIONS = [Fail, InvalidArgument, NoSuchFile, NoModel, EngineError, RuntimeException,
              InvalidProtobuf, ModelLoaded, NotImplemented, InvalidGraph, EPFail,
              ModelLoadCanceled, ModelRequiresCompilation, NotFound, DeviceReset]


class OrtRuntimeError(NnplugError, RuntimeError):
    """Where onnxruntime raises a plain ``RuntimeError`` (unknown provider, missing config
    entry): that type, and an nnplug error."""


# nnplug error -> onnxruntime status class; the first match wins (subclasses first)
_MAP = [
    (ValidationError, InvalidGraph),
    (ModelError, InvalidGraph),
    (InputError, InvalidArgument),
    (InvalidArgumentError, InvalidArgument),
    (TargetError, InvalidArgument),
    (UnsupportedNodeError, NotImplemented),
    (PluginError, EPFail),
    (RunTerminatedError, Fail),
]


def translate(e: NnplugError) -> BaseException:
    """The onnxruntime exception for an nnplug error (``e`` itself where onnxruntime raises a
    built-in type too: TypeError, AttributeError, BufferError)."""
    if isinstance(e, (OrtError, OrtRuntimeError)) or isinstance(e, (TypeError, AttributeError,
                                                                    BufferError)):
        return e
    for nnplug_type, ort_type in _MAP:
        if isinstance(e, nnplug_type):
            return ort_type(str(e))
    return Fail(str(e))


def ort_errors(fn):
    """Raise onnxruntime's exception types from ``fn`` (nnplug's are chained as the cause)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except NnplugError as e:
            t = translate(e)
            if t is e:
                raise
            raise t from e

    return wrapper


__all__ = ["EXCEPTIONS", "OrtError", "OrtRuntimeError", "ort_errors", "translate",
           *(c.__name__ for c in EXCEPTIONS)]
