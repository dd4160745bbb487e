"""``onnxruntime.capi._pybind_state`` (imported as ``C``): the same names as
:mod:`.onnxruntime_pybind11_state`."""

from .onnxruntime_pybind11_state import *  # noqa: F403
from .onnxruntime_pybind11_state import __all__  # noqa: F401
