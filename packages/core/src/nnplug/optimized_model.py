"""The model as a Network runs it, written back as ONNX (``SessionOptions.
optimized_model_filepath``): the nodes left after function expansion, constant folding and
merging, with the initializers and folded values they read. onnxruntime and nnplug load it
and compute the same outputs as from the original."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from .errors import NnplugError

if TYPE_CHECKING:
    import onnx

    from .network import Network

EXTERNAL_FILE = "session.optimized_model_external_initializers_file_name"
"""Session config entry (onnxruntime's): the file, beside the model, for large initializers."""
EXTERNAL_MIN_SIZE = "session.optimized_model_external_initializers_min_size_in_bytes"
"""Session config entry (onnxruntime's): initializers from this size go to that file."""


def optimized_model(net: Network, original: onnx.ModelProto) -> onnx.ModelProto:
    """``net``'s nodes as a model, with ``original``'s inputs, outputs, opsets, functions
    and metadata."""
    import onnx
    from onnx import helper, numpy_helper

    g = original.graph
    read = {x for n in net.nodes for x in n.inputs if x} | {o.name for o in g.output}
    constants = net.constants
    inits = [numpy_helper.from_array(np.asarray(constants[name]), name)
             for name in sorted(read & set(constants))]
    graph = helper.make_graph([n.proto for n in net.nodes], g.name or "model",
                              [i for i in g.input if i.name not in constants], list(g.output),
                              inits, doc_string=g.doc_string)
    model = helper.make_model(graph, opset_imports=list(original.opset_import),
                              functions=list(original.functions))
    # every initializer is a constant here, not a graph input: IR 4 on allows that
    model.ir_version = max(original.ir_version or onnx.IR_VERSION, 4)
    for field in ("producer_name", "producer_version", "domain", "model_version",
                  "doc_string"):
        setattr(model, field, getattr(original, field))
    model.metadata_props.extend(original.metadata_props)
    return model


def write_optimized_model(net: Network, original: onnx.ModelProto, path: str,
                          config: dict) -> str:
    """Write :func:`optimized_model` to ``path``; large initializers go to the external file
    the session config names (onnxruntime's entries)."""
    import onnx

    model = optimized_model(net, original)
    location = config.get(EXTERNAL_FILE, "")
    try:
        if location:
            threshold = int(config.get(EXTERNAL_MIN_SIZE, "1024"))
            onnx.save_model(model, path, save_as_external_data=True,
                            all_tensors_to_one_file=True, location=location,
                            size_threshold=threshold, convert_attribute=False)
        else:
            onnx.save_model(model, path)
    except (OSError, ValueError) as e:
        raise NnplugError(f"cannot write the optimized model to {path!r}: {e}") from None
    return os.fspath(path)


__all__ = ["EXTERNAL_FILE", "EXTERNAL_MIN_SIZE", "optimized_model", "write_optimized_model"]
