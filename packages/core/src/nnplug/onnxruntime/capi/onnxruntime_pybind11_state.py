"""``onnxruntime.capi.onnxruntime_pybind11_state``: the native layer's names (exception
classes, OrtValue, OrtValueVector, options...), all from :mod:`nnplug.onnxruntime`."""

from .. import *  # noqa: F403 - this layer exports what the package does
from .. import __all__ as _package_names
from .._errors import (
    DeviceReset,
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelLoadCanceled,
    ModelLoaded,
    ModelRequiresCompilation,
    NoModel,
    NoSuchFile,
    NotFound,
    NotImplemented,  # noqa: A004 - onnxruntime's name
    RuntimeException,
)
from .._session import InferenceSession, get_default_session_options
from .._session import IOBinding as SessionIOBinding
from .._values import OrtValue, is_dlpack_uint8_tensor

__all__ = [*_package_names, "DeviceReset", "EPFail", "EngineError", "Fail", "InvalidArgument",
           "InvalidGraph", "InvalidProtobuf", "ModelLoadCanceled", "ModelLoaded",
           "ModelRequiresCompilation", "NoModel", "NoSuchFile", "NotFound", "NotImplemented",
           "RuntimeException", "InferenceSession", "OrtValue", "SessionIOBinding",
           "get_default_session_options", "is_dlpack_uint8_tensor"]
