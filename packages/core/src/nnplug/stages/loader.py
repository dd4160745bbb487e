"""The read stage: a path, bytes or ModelProto -> the checked, shape-inferred :class:`Model`
the later stages of :mod:`nnplug.pipeline` work on (built by :mod:`nnplug.from_onnx`). Files
and bytes are read by :mod:`nnplug.model_file`: each weight copied once."""

from __future__ import annotations

import os

import onnx

from ..checking import check_model
from ..errors import ModelError
from ..from_onnx import model_from_proto
from ..graph import Model
from ..inference import skeleton
from ..model_file import ModelFile, read_bytes, read_file


def read_model(model, external_data_dir: str | os.PathLike | None = None,
               lazy: bool = False) -> ModelFile:
    """The model read from a path, bytes, a ModelProto or a ModelFile, with clear errors.
    ``lazy``: a file's weights stay in it until a stage asks (see model_file.read_file).

    Tensors stored outside the model (external data) are read from the model file's folder
    for a path, and from ``external_data_dir`` for bytes or a ModelProto (which know no
    folder of their own)."""
    if isinstance(model, ModelFile):
        return model
    if isinstance(model, onnx.ModelProto):
        return ModelFile(_with_external_data(model, external_data_dir, "the ModelProto"))
    if isinstance(model, (bytes, bytearray, memoryview)):
        try:
            read = read_bytes(model)
        except Exception as e:
            raise ModelError(f"the model bytes are not a valid ONNX model: {e}") from None
        return ModelFile(_with_external_data(read.proto, external_data_dir, "the model bytes"),
                         read.weights)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise ModelError(f"model file {path!r} does not exist")
        if os.path.isdir(path):
            raise ModelError(f"model path {path!r} is a directory; give the .onnx file")
        if os.path.getsize(path) == 0:
            raise ModelError(f"model file {path!r} is empty (0 bytes): export or copy it again")
        try:
            return read_file(path, lazy)
        except Exception as e:
            raise ModelError(f"model file {path!r} is not a valid ONNX model: {e}") from None
    raise ModelError(
        f"a model is a path, bytes or onnx.ModelProto, not {type(model).__name__}"
    )


def _external_tensors(proto: onnx.ModelProto) -> list[str]:
    from onnx.external_data_helper import _get_all_tensors, uses_external_data

    return [t.name for t in _get_all_tensors(proto) if uses_external_data(t)]


def _with_external_data(proto: onnx.ModelProto, folder, what: str) -> onnx.ModelProto:
    """``proto`` with its external tensors read from ``folder`` (a copy: the caller's
    ModelProto is left as it was)."""
    names = _external_tensors(proto)
    if not names:
        return proto
    if folder is None:
        raise ModelError(
            f"{what} keep {len(names)} tensor(s) in external data files (e.g. {names[0]!r}), "
            f"and bytes or a ModelProto have no folder to find them in. Fix: pass the folder "
            f"that holds those files (external_data_dir=... in Runtime.load, or the session "
            f"config entry 'session.model_external_initializers_file_folder_path'), or load "
            f"the model from its path")
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise ModelError(f"external_data_dir {folder!r} is not a folder")
    from onnx.external_data_helper import load_external_data_for_model

    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    try:
        load_external_data_for_model(copy, folder)
    except Exception as e:
        raise ModelError(f"cannot read the external data of {what} from {folder!r}: {e}") from None
    return copy


def load(model, custom_ops: dict | None = None, external_data_dir=None,
         functions=()) -> Model:
    """Read, check and shape-infer ``model``. ``custom_ops`` (op_type -> CustomOp) supply
    ``shape_infer`` for the nodes ONNX cannot infer; ``external_data_dir``: see read_model;
    ``functions``: the (domain, op type) pairs plugins register bodies for (see
    nnplug.functions), which the checker lets through."""
    read = read_model(model, external_data_dir)
    proto = read.proto
    custom_ops = custom_ops or {}
    # ListFields first: ByteSize walks every weight's bytes (seconds on a 400 MB model)
    if not proto.graph.ListFields() and proto.graph.ByteSize() == 0:
        raise ModelError("the model has an empty graph")
    warned = check_model(skeleton(proto), functions)  # the weights' types, not their bytes
    return model_from_proto(proto, custom_ops, warned, read.weights)
