"""Element types and shapes of ``ai.onnx.ml`` outputs that ONNX shape inference leaves unknown.

ONNX infers nothing for several traditional-ML ops (Scaler, SVMRegressor, the probabilities of
TreeEnsembleClassifier, ...), so in a scikit-learn pipeline every value after the first such op
is untyped and no backend can be handed it. :func:`complete` fills those outputs from the ops'
specifications (types only, no computation) and lets ONNX infer the rest of the graph again.
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper, numpy_helper

ML = "ai.onnx.ml"
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _rows(shape):
    if shape is None:
        return None
    return 1 if len(shape) == 1 else shape[0]


def _label_type(a):
    return TensorProto.STRING if a.get("classlabels_strings") else I64


def _svm_columns(a):
    c = len(a.get("classlabels_ints") or a.get("classlabels_strings") or []) or 1
    if sum(a.get("vectors_per_class") or []) > 0 and not a.get("prob_a"):
        return c * (c - 1) // 2 if c > 2 else 2
    return c


def _linear_columns(a):
    c = len(a.get("intercepts") or [])
    labels = a.get("classlabels_ints") or a.get("classlabels_strings") or []
    return 2 if c == 1 and len(labels) == 2 else (c or None)


def _encoder_type(a):
    t = a.get("values_tensor")
    if t is not None:
        return t.data_type
    if a.get("values_strings"):
        return TensorProto.STRING
    return I64 if "values_int64s" in a else F


def _outputs(node, types, consts):
    """[(elem_type, shape)] for the node's outputs, or None when the input is unknown."""
    if not node.input or node.input[0] not in types:
        return None
    et, shape = types[node.input[0]]
    a = _attrs(node)
    n = _rows(shape)
    op = node.op_type
    if op in ("Scaler", "Normalizer"):
        return [(F, shape)]
    if op in ("Binarizer", "Imputer"):
        return [(et, shape)]
    if op == "LabelEncoder":
        return [(_encoder_type(a), shape)]
    if op == "OneHotEncoder":
        k = len(a.get("cats_int64s") or a.get("cats_strings") or []) or None
        return [(F, None if shape is None else tuple(shape) + (k,))]
    if op == "ArrayFeatureExtractor":
        idx = consts.get(node.input[1]) if len(node.input) > 1 else None
        k = None if idx is None else int(idx.size)
        if shape is None:
            return [(et, None)]
        return [(et, (1, k) if len(shape) == 1 else tuple(shape[:-1]) + (k,))]
    if op == "LinearClassifier":
        return [(_label_type(a), (n,)), (F, (n, _linear_columns(a)))]
    if op == "LinearRegressor":
        return [(F, (n, a.get("targets", 1)))]
    if op == "SVMClassifier":
        return [(_label_type(a), (n,)), (F, (n, _svm_columns(a)))]
    if op == "SVMRegressor":
        return [(F, (n, 1))]
    if op == "TreeEnsembleClassifier":
        c = len(a.get("classlabels_int64s") or a.get("classlabels_strings") or []) or None
        return [(_label_type(a), (n,)), (F, (n, c))]
    if op == "TreeEnsembleRegressor":
        return [(F, (n, a.get("n_targets", 1)))]
    if op == "TreeEnsemble":
        return [(et, (n, a.get("n_targets")))]
    return None


def _known(model):
    g = model.graph
    types, consts = {}, {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        t = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if t is None or not t.elem_type:
            continue
        shape = None
        if t.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        types[vi.name] = (t.elem_type, shape)
    for init in g.initializer:
        types[init.name] = (init.data_type, tuple(init.dims))
        consts[init.name] = numpy_helper.to_array(init)
    return types, consts


def complete(model: onnx.ModelProto, infer) -> onnx.ModelProto:
    """``model`` with types for the untyped outputs of ai.onnx.ml nodes; ``infer`` re-runs ONNX
    shape inference after each round so that ops downstream are typed too."""
    g = model.graph
    if not any(n.domain == ML for n in g.node):
        return model
    for _ in range(len(g.node)):
        types, consts = _known(model)
        added = False
        for node in g.node:
            if node.domain != ML or all(not o or o in types for o in node.output):
                continue
            outs = _outputs(node, types, consts)
            if outs is None:
                continue
            for name, (et, shape) in zip(node.output, outs):
                if name and name not in types:
                    g.value_info.append(helper.make_tensor_value_info(name, et, shape))
                    added = True
        if not added:
            break
        model = infer(model)
        g = model.graph
    return model
