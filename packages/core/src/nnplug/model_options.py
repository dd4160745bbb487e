"""What :class:`nnplug.SessionOptions` change in a model before it loads (onnxruntime's
names): free dimension overrides, initializers the caller gives, external data given in
memory, and the options a model carries in its metadata (``ORT_LOAD_CONFIG_FROM_MODEL``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

import numpy as np

from .errors import InvalidArgumentError, ModelError
from .model_file import ModelFile

if TYPE_CHECKING:
    import onnx

CONFIG_FROM_MODEL_ENV = "ORT_LOAD_CONFIG_FROM_MODEL"
"""Set to 1: a model's ``ort_config`` metadata entry sets session options (onnxruntime's)."""


def as_array(value) -> np.ndarray:
    """An initializer given as an array, an nnplug Tensor, an OrtValue or a DLPack object."""
    if hasattr(value, "numpy"):
        return np.asarray(value.numpy())
    return np.asarray(value)


def read_with_overrides(source, so, folder=None, lazy: bool = False) -> ModelFile:
    """The model ``source`` (path, bytes or ModelProto) with what ``so`` changes applied;
    ``folder``: where external data files are for bytes or a ModelProto; ``lazy``: see
    ``nnplug.model_file.read_file``."""
    from .stages.loader import read_model

    if so._external_initializers or so._external_files:
        proto, home = _without_external_data(source)
        _fill_external(proto, so)
        read = read_model(proto, folder or home)  # the rest from the folder, as usual
    else:
        read = read_model(source, folder, lazy)
    proto = read.proto
    if so._initializers:
        proto = _replace_initializers(proto, so._initializers)
    if so._free_dims_by_name or so._free_dims_by_denotation:
        proto = _override_free_dims(proto, so._free_dims_by_name, so._free_dims_by_denotation)
    # a replaced initializer has its own bytes again: model_file.weight_of passes over it
    return ModelFile(proto, read.weights)


def _without_external_data(source) -> tuple[onnx.ModelProto, str | None]:
    """The model with its external tensors not read yet (a copy), and its folder."""
    import onnx

    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ModelError(f"model file {path!r} does not exist")
        try:
            return onnx.load(path, load_external_data=False), os.path.dirname(os.path.abspath(path))
        except Exception as e:
            raise ModelError(f"model file {path!r} is not a valid ONNX model: {e}") from None
    if isinstance(source, (bytes, bytearray, memoryview)):
        try:
            return onnx.load_from_string(bytes(source)), None
        except Exception as e:
            raise ModelError(f"the model bytes are not a valid ONNX model: {e}") from None
    if isinstance(source, onnx.ModelProto):
        copy = onnx.ModelProto()
        copy.CopyFrom(source)
        return copy, None
    raise ModelError(f"a model is a path, bytes or onnx.ModelProto, not {type(source).__name__}")


def _fill_external(proto: onnx.ModelProto, so) -> None:
    """External tensors whose data the caller gave: by tensor name (OrtValues) or by the
    name of the file they would be read from (bytes in memory)."""
    from onnx import numpy_helper
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    for t in _get_all_tensors(proto):
        if not uses_external_data(t):
            continue
        if t.name in so._external_initializers:
            filled = numpy_helper.from_array(so._external_initializers[t.name], t.name)
            t.CopyFrom(filled)
            continue
        info = {e.key: e.value for e in t.external_data}
        data = so._external_files.get(info.get("location", ""))
        if data is None:
            continue
        offset = int(info.get("offset", 0) or 0)
        length = int(info.get("length", 0) or 0) or len(data) - offset
        if offset + length > len(data):
            raise ModelError(f"initializer {t.name!r} reads {length} bytes at offset {offset} "
                             f"of {info['location']!r}, which holds {len(data)} bytes in memory")
        t.raw_data = bytes(data[offset:offset + length])
        del t.external_data[:]
        t.data_location = t.DEFAULT


def _replace_initializers(proto: onnx.ModelProto, given: dict) -> onnx.ModelProto:
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    inits = {t.name: t for t in out.graph.initializer}
    for name, value in given.items():
        if name not in inits:
            raise InvalidArgumentError(
                f"SessionOptions.add_initializer({name!r}): the model has no initializer of that "
                f"name; its initializers: {', '.join(inits) or 'none'}")
        old = inits[name]
        if list(value.shape) != list(old.dims) or \
                onnx.helper.np_dtype_to_tensor_dtype(value.dtype) != old.data_type:
            raise InvalidArgumentError(
                f"SessionOptions.add_initializer({name!r}): the value is {value.dtype} "
                f"{list(value.shape)}, the model's initializer is "
                f"{onnx.helper.tensor_dtype_to_np_dtype(old.data_type)} {list(old.dims)}")
        old.CopyFrom(numpy_helper.from_array(value, name))
    return out


def _override_free_dims(proto: onnx.ModelProto, by_name: dict, by_denotation: dict):
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for vi in out.graph.input:
        if not vi.type.HasField("tensor_type"):
            continue
        for d in vi.type.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                continue
            size = by_name.get(d.dim_param) if d.dim_param else None
            if size is None and d.denotation:
                size = by_denotation.get(d.denotation)
            if size is not None:
                d.dim_value = size  # clears dim_param: the dimension is fixed now
    return out


def config_from_model(proto: onnx.ModelProto, so):
    """``so``, or a copy with the options of the model's ``ort_config`` metadata entry when
    the environment asks for them (``ORT_LOAD_CONFIG_FROM_MODEL=1``)."""
    if os.environ.get(CONFIG_FROM_MODEL_ENV, "0") != "1":
        return so
    text = next((p.value for p in proto.metadata_props if p.key == "ort_config"), None)
    if text is None:
        return so
    try:
        options = json.loads(text).get("session_options", {})
    except (ValueError, AttributeError) as e:
        raise ModelError(f"the model's 'ort_config' metadata is not the JSON object "
                         f"onnxruntime reads ({e})") from None
    copy = so.copy()
    for name, value in options.items():
        copy._set_from_config(name, value)
    return copy


__all__ = ["CONFIG_FROM_MODEL_ENV", "as_array", "config_from_model", "read_with_overrides"]
