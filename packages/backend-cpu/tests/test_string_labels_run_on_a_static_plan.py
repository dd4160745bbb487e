"""A tree classifier with string class labels and a symbolic batch (skl2onnx's export of a
classifier fitted on strings) runs a repeated batch size on a static plan made from its first
run, like one with integer labels: one run_steps call whose string output the host reads back
from the backend's elements. The labels are onnxruntime's at every batch size, run after run
and from several threads at once."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

from nnplug.native.plan import StaticRunner

ort = pytest.importorskip("onnxruntime")

LABELS = ["setosa", "versicolor", "virginica"]


def string_label_trees():
    """Two depth-2 trees over 4 features, three string labels, probabilities as well."""
    nodes = dict(nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1],
                 nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
                 nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0],
                 nodes_values=[0.0, 0.5, 0.0, 0.0, 0.0, -0.25, 0.0, 0.0],
                 nodes_modes=["BRANCH_LEQ", "BRANCH_LT", "LEAF", "LEAF", "LEAF",
                              "BRANCH_LEQ", "LEAF", "LEAF"],
                 nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0],
                 nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0])
    leaves = [(0, 2, [0.8, 0.1, 0.1]), (0, 3, [0.2, 0.6, 0.2]), (0, 4, [0.1, 0.2, 0.7]),
              (1, 1, [0.5, 0.3, 0.2]), (1, 2, [0.1, 0.3, 0.6])]
    cls = dict(class_treeids=[], class_nodeids=[], class_ids=[], class_weights=[])
    for tree, node, weights in leaves:
        for c, w in enumerate(weights):
            cls["class_treeids"].append(tree)
            cls["class_nodeids"].append(node)
            cls["class_ids"].append(c)
            cls["class_weights"].append(w)
    node = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "probabilities"],
                            domain="ai.onnx.ml", classlabels_strings=LABELS,
                            post_transform="NONE", name="trees", **nodes, **cls)
    g = helper.make_graph(
        [node], "string_label_trees",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("label", TensorProto.STRING, ["N"]),
         helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["N", 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ai.onnx.ml", 3)])


def _x(batch, seed):
    return np.random.default_rng(seed).standard_normal((batch, 4)).astype(np.float32)


def _static_plans(net):
    (step,) = net._steps
    return {shapes: plan for shapes, plan in step.run_arrays.__self__._fixed.items()
            if isinstance(plan, StaticRunner)}


def test_a_repeated_batch_runs_on_a_static_plan_with_onnxruntime_labels(rt):
    model = string_label_trees()
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with rt.load(model, backends=["cpu"]) as net:
        assert net._host_path is not None
        for batch in (1, 7, 1, 7, 1, 0, 7):
            x = _x(batch, seed=batch + 1)
            want_label, want_p = ref.run(None, {"X": x})
            got = net.run({"X": x})
            assert got["label"].dtype == object and got["label"].shape == (batch,)
            assert got["label"].tolist() == want_label.tolist()
            np.testing.assert_allclose(got["probabilities"], want_p, rtol=1e-6, atol=1e-7)
        # batches 1 and 7 ran again after their first run: each has its static plan now
        assert set(_static_plans(net)) == {((1, 4),), ((7, 4),)}


def test_threads_sharing_the_static_plan_get_their_own_labels(rt):
    model = string_label_trees()
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    xs = [_x(3, seed=s) for s in range(6)]
    want = [ref.run(None, {"X": x})[0].tolist() for x in xs]
    errors = []
    with rt.load(model, backends=["cpu"]) as net:
        net.run({"X": xs[0]})
        assert _static_plans(net), "the batch's first run made no static plan"
        barrier = threading.Barrier(len(xs))

        def work(i):
            try:
                barrier.wait()
                for _ in range(100):
                    assert net.run({"X": xs[i]})["label"].tolist() == want[i]
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors[0]
