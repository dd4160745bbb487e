"""``onnxruntime.capi.onnxruntime_inference_collection``: the Python layer's classes and
``check_and_normalize_provider_args``."""

from .._adapters import AdapterFormat
from .._devices import OrtDevice
from .._providers import check_and_normalize_provider_args
from .._session import InferenceSession, IOBinding
from .._sparse import SparseTensor
from .._values import OrtValue

Session = InferenceSession

__all__ = ["AdapterFormat", "IOBinding", "InferenceSession", "OrtDevice", "OrtValue", "Session",
           "SparseTensor", "check_and_normalize_provider_args"]
