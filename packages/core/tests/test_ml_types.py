"""Types of ai.onnx.ml outputs ONNX shape inference leaves unknown are filled in at load, so
that the values after them in a scikit-learn style pipeline are typed for backends."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from nnplug.stages import loader

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def pipeline() -> onnx.ModelProto:
    """X[N,3] -> Scaler -> SVMRegressor -> Cast(double) -> Y, and
    X -> ArrayFeatureExtractor([0, 2]) -> Imputer -> TreeEnsembleClassifier -> Identity -> P."""
    ml = "ai.onnx.ml"
    nodes = [
        helper.make_node("Scaler", ["X"], ["s"], domain=ml, offset=[0.0], scale=[2.0]),
        helper.make_node("SVMRegressor", ["s"], ["r"], domain=ml, coefficients=[1.0, 2.0, 3.0], rho=[0.5],
                         kernel_params=[1.0, 0.0, 1.0]),
        helper.make_node("Cast", ["r"], ["Y"], to=TensorProto.DOUBLE),
        helper.make_node("ArrayFeatureExtractor", ["X", "idx"], ["a"], domain=ml),
        helper.make_node("Imputer", ["a"], ["i"], domain=ml, imputed_value_floats=[0.0],
                         replaced_value_float=float("nan")),
        helper.make_node("TreeEnsembleClassifier", ["i"], ["label", "prob"], domain=ml,
                         nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
                         nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.0, 0.0, 0.0],
                         nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0], class_treeids=[0, 0],
                         class_nodeids=[1, 2], class_ids=[0, 1], class_weights=[1.0, 1.0],
                         classlabels_int64s=[4, 5, 6]),
        helper.make_node("Identity", ["prob"], ["P"]),
    ]
    g = helper.make_graph(nodes, "p", [helper.make_tensor_value_info("X", F, ["N", 3])],
                          [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, ["N", 1]),
                           helper.make_tensor_value_info("P", F, ["N", 3])],
                          [numpy_helper.from_array(np.array([0, 2], np.int64), "idx")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ml, 1)])


def test_untyped_ml_outputs_are_typed_and_typing_continues_downstream():
    m = loader.load(pipeline())
    v = m.values
    assert v["s"].dtype == np.float32 and v["s"].shape[1] == 3
    assert v["r"].dtype == np.float32 and v["r"].shape[1] == 1
    assert v["Y"].dtype == np.float64
    assert v["a"].dtype == np.float32 and v["a"].shape[1] == 2
    assert v["i"].dtype == np.float32
    assert v["label"].dtype == np.int64
    assert v["prob"].dtype == np.float32 and v["prob"].shape[1] == 3
    assert v["P"].dtype == np.float32


def test_models_without_ml_ops_are_left_as_onnx_inferred_them():
    from models import mlp

    m = loader.load(mlp())
    assert m.values["y"].dtype == np.float32
