"""nnplug's oneDNN backend (x86-64).

The backend is the shared object ``libnnplug_backend_onednn.so`` in this package; nnplug loads
it through the ``nnplug.backends`` entry point (``onednn = "nnplug_backend_onednn:library_path"``).
It does not link oneDNN: at init it dlopen()s ``libgomp.so.1`` (the system's GNU OpenMP) and
the ``libdnnl.so.3`` that ``library_path()`` finds in the ``onednn-cpu-gomp`` wheel and passes
in ``NNPLUG_ONEDNN_LIBRARY``. It runs what it can run exactly (see ``OPS``) and declines the
rest, which another backend (nnplug-backend-cpu) then runs.
"""

from __future__ import annotations

import os

from nnplug import packaged_library

from ._version import __version__

LIBRARY = "libnnplug_backend_onednn.so"
LIBRARY_ENV = "NNPLUG_ONEDNN_LIBRARY"
ONEDNN_DIST = "onednn-cpu-gomp"
ONEDNN_SONAME = "libdnnl.so.3"

OPS = (
    "Abs", "Add", "AveragePool", "BatchNormalization", "Clip", "Concat", "Conv", "Div", "Elu",
    "Erf", "Exp", "Flatten", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "HardSigmoid",
    "HardSwish", "InstanceNormalization", "LRN", "LayerNormalization", "LeakyRelu", "Log",
    "LogSoftmax", "MatMul", "Max", "MaxPool", "Min", "Mul", "Neg", "Relu", "Reshape", "Sigmoid",
    "Slice", "Softmax", "Split", "Sqrt", "Sub", "Sum", "Tanh", "Transpose",
)
"""The ONNX op types the backend may claim (float32; symbolic dimensions are planned per shape at
run time; the attribute and shape combinations it handles are in docs/backends/onednn.md)."""

__all__ = ["LIBRARY", "LIBRARY_ENV", "OPS", "__version__", "find_onednn", "library_path"]


def find_onednn() -> str | None:
    """Path of the ``libdnnl.so.3`` installed by the ``onednn-cpu-gomp`` wheel, or None."""
    from importlib import metadata

    try:
        files = metadata.distribution(ONEDNN_DIST).files or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == ONEDNN_SONAME:
            path = os.path.realpath(str(f.locate()))
            if os.path.isfile(path):
                return path
    return None


def library_path() -> str:
    """Path of the backend's shared object (what the entry point hands to nnplug; a
    nnplug.NativeLibraryMissingError saying how to rebuild when this install has none). Also
    sets ``NNPLUG_ONEDNN_LIBRARY`` to the wheel's libdnnl.so.3 unless it is set already."""
    path = packaged_library(__file__, LIBRARY)
    if not os.environ.get(LIBRARY_ENV):
        found = find_onednn()
        if found:  # else the backend's init reports what is missing and how to install it
            os.environ[LIBRARY_ENV] = found
    return path
