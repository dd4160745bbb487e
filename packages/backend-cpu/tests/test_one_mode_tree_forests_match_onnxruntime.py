"""Forests whose branches all share one ordered mode (BRANCH_LEQ, LT, GTE or GT: every
scikit-learn, XGBoost and LightGBM export) run on the cpu kernel's packed layout, walking four
rows at a time over blocks of 64 rows, and a batch of fewer rows walking several trees at a
time. Against onnxruntime, at 1 and 2 threads, on 203 rows (three full blocks, a partial one,
and a remainder of the row walk) and on 1, 3 and 7 of them: missing-value tracks
with NaN inputs, inputs equal to thresholds, one-leaf trees, base values, every post_transform,
int64 and double inputs (double takes the general walk and must agree with it), binary and
multi-class classifiers, regressors with every aggregate, and TreeEnsemble (ai.onnx.ml 5).

onnxruntime runs 40-row slices with one thread: it then adds each row's trees in tree order in
float32, as this kernel does for any batch and thread count, so labels are equal and sums agree
to the last bit. What still differs is exp/erf in the transforms (each build's libm and
instruction order, a few ulps): rtol 1e-5 (about 80 float32 ulps) and atol 1e-6 for values near
0 (1 - p). PROBIT cancels near 0 (see test_tree_and_linear_models_match_onnxruntime.py): its
outputs get another 4e-6 / |y| absolute. A wrong leaf moves a score by at least one leaf weight
(0.02 or more here), far beyond these tolerances.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnplug
import nnplug_backend_cpu

SEED = 20261205
ROWS, SLICE, F = 203, 40, 5
PIECES = [(0, ROWS), (0, 1), (5, 3), (17, 7)]
"""(first row, rows) run: all of them, and batches too small to walk rows together (their
trees step together instead)."""
ORDERED = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT"]
POSTS = ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT"]
ELEM = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.int64: TensorProto.INT64}


@pytest.fixture(scope="module")
def runtime():
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(nnplug_backend_cpu.library_path())
    yield r
    r.backends["cpu"].backend.set_num_threads(0)


def tree(rng, depth, mode, thresholds, base):
    """One tree in pre-order, node ids from `base`: (rows of the nodes_* attributes, leaf ids).
    Depth 0 is a one-leaf tree; other branches stop early now and then."""
    rows, leaves = [], []

    def node(d):
        i = base + len(rows)
        rows.append(None)
        if d == depth or (d > 0 and rng.random() < 0.25):
            rows[i - base] = (i, 0, "LEAF", 0.0, 0, 0, 0)
            leaves.append(i)
            return i
        t = node(d + 1)
        f = node(d + 1)
        rows[i - base] = (i, int(rng.integers(F)), mode, float(rng.choice(thresholds)), t, f,
                          int(rng.integers(2)))
        return i

    node(0)
    return rows, leaves


def forest(rng, mode, n_trees, thresholds):
    """nodes_* attributes (trees in order, ids per tree) and the (tree id, node id) leaves."""
    cols = {k: [] for k in ("treeids", "nodeids", "featureids", "modes", "values",
                            "truenodeids", "falsenodeids", "missing_value_tracks_true")}
    leaves = []
    for t in range(n_trees):
        depth = 0 if t == 1 else int(rng.integers(1, 6))  # tree 1: a single leaf
        rows, lv = tree(rng, depth, mode, thresholds, 0)
        for r in rows:
            for k, v in zip(list(cols)[1:], r):
                cols[k].append(v)
            cols["treeids"].append(t)
        leaves += [(t, i) for i in lv]
    return {f"nodes_{k}": v for k, v in cols.items()}, leaves


def inputs(rng, thresholds, dtype):
    """ROWS x F: uniform, a quarter equal to a threshold, a tenth NaN (floats)."""
    x = rng.uniform(-1.2, 1.2, (ROWS, F))
    hit = rng.random((ROWS, F)) < 0.25
    x[hit] = rng.choice(thresholds, int(hit.sum()))
    if dtype == np.int64:
        return np.round(x * 2).astype(dtype)
    x[rng.random((ROWS, F)) < 0.1] = np.nan
    return x.astype(dtype)


def model_of(op, attrs, x, outputs, ml_opset=3):
    node = helper.make_node(op, ["X"], [o[0] for o in outputs], name="forest", domain="ai.onnx.ml",
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", ELEM[x.dtype.type], ["N", F])],
        [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("ai.onnx.ml", ml_opset)])
    m.ir_version = 9
    return m


def onnxruntime_slices(model, x):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    parts = [sess.run(None, {"X": x[i:i + SLICE]}) for i in range(0, len(x), SLICE)]
    return [np.concatenate(p) for p in zip(*parts)]


def mismatches(runtime, case, model, x, probit=False, score_cols=None):
    """score_cols: the score columns onnxruntime writes (None: all)."""
    want = onnxruntime_slices(model, x)
    lib = runtime.backends["cpu"].backend
    found = []
    with runtime.load(model, backends=["cpu"]) as net:
        assert set(net.assignment.values()) == {"cpu"}, net.assignment
        for threads, (start, n) in [(t, p) for t in (1, 2) for p in PIECES]:
            lib.set_num_threads(threads)
            out = net.run({"X": x[start:start + n]})
            for k, (o, w) in enumerate(zip(net.outputs, want)):
                g, w = out[o.name], w[start:start + n]
                where = f"{case}, {threads} thread(s), rows {start}:{start + n}, output {k}"
                if g.shape != w.shape or g.dtype != w.dtype:
                    found.append(f"{where}: {g.dtype}{g.shape}, onnxruntime {w.dtype}{w.shape}")
                elif w.dtype.kind in "iu":
                    bad = np.flatnonzero(g != w)
                    if bad.size:
                        found.append(f"{where}: labels differ at rows {bad[:6].tolist()}")
                else:
                    if score_cols is not None:
                        g, w = g[:, score_cols], w[:, score_cols]
                    atol = 1e-6 + (4e-6 / np.maximum(np.abs(w), 1e-30) if probit else 0)
                    with np.errstate(invalid="ignore"):
                        close = np.isclose(g, w, rtol=1e-5, atol=0) | (np.abs(g - w) <= atol)
                    if not close.all():
                        r = int(np.argwhere(~close)[0][0])
                        found.append(f"{where}: row {r}: {g[r].tolist()} vs {w[r].tolist()}")
    return found


def weights(rng, n, post, n_trees):
    """Under PROBIT small and positive, so the summed scores stay in (0, 1)."""
    return rng.uniform(0.02, 0.9 / n_trees, n) if post == "PROBIT" else rng.uniform(-1, 1, n)


@pytest.mark.parametrize("post", POSTS)
@pytest.mark.parametrize("mode", ORDERED)
def test_one_mode_classifiers_match_onnxruntime(runtime, mode, post):
    found = []
    for c, (classes, dtype, n_base) in enumerate(
            [(2, np.float32, 0), (2, np.float32, 2), (2, np.int64, 1), (3, np.float32, 3),
             (4, np.float32, 0), (3, np.float64, 0)]):
        rng = np.random.default_rng([SEED, ORDERED.index(mode), POSTS.index(post), c])
        thresholds = rng.uniform(-1, 1, 10).astype(np.float32).astype(float)
        n_trees = int(rng.integers(3, 9))
        attrs, leaves = forest(rng, mode, n_trees, thresholds)
        # binary: one score per leaf (onnxruntime's binary case, as scikit-learn exports it)
        per_leaf = [0] if classes == 2 else list(range(classes))
        ct, cn, ci = zip(*[(t, i, k) for t, i in leaves for k in per_leaf])
        attrs.update(class_treeids=list(ct), class_nodeids=list(cn), class_ids=list(ci),
                     class_weights=weights(rng, len(ci), post, n_trees).tolist(),
                     classlabels_int64s=[3, 7, 11, 20][:classes], post_transform=post)
        if n_base:
            attrs["base_values"] = rng.uniform(0, 0.05, n_base).tolist()
        x = inputs(rng, thresholds, dtype)
        model = model_of("TreeEnsembleClassifier", attrs, x,
                         [("Y", TensorProto.INT64, ["N"]), ("Z", TensorProto.FLOAT, ["N", classes])])
        # a binary PROBIT classifier with fewer than 2 base values: onnxruntime writes one
        # score and leaves the second column as the memory held
        cols = [0] if classes == 2 and post == "PROBIT" and n_base < 2 else None
        found += mismatches(runtime, f"{classes} classes {dtype.__name__} base={n_base}", model, x,
                            probit=post == "PROBIT", score_cols=cols)
    assert not found, "\n".join(found[:20])


@pytest.mark.parametrize("mode", ORDERED)
@pytest.mark.parametrize("agg", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_one_mode_regressors_match_onnxruntime(runtime, mode, agg):
    found = []
    for c, (targets, post, n_base) in enumerate(
            [(1, "NONE", 1), (1, "NONE", 0), (3, "NONE", 3), (3, "SOFTMAX", 0),
             (2, "LOGISTIC", 2)]):
        rng = np.random.default_rng([SEED, 9, ORDERED.index(mode), c, len(agg)])
        thresholds = rng.uniform(-1, 1, 10).astype(np.float32).astype(float)
        n_trees = int(rng.integers(3, 9))
        attrs, leaves = forest(rng, mode, n_trees, thresholds)
        tt, tn, ti = zip(*[(t, i, k) for t, i in leaves for k in range(targets)])
        attrs.update(target_treeids=list(tt), target_nodeids=list(tn), target_ids=list(ti),
                     target_weights=rng.uniform(-1, 1, len(ti)).tolist(), n_targets=targets,
                     aggregate_function=agg, post_transform=post)
        if n_base:
            attrs["base_values"] = rng.uniform(-0.5, 0.5, n_base).tolist()
        x = inputs(rng, thresholds, np.float32)
        model = model_of("TreeEnsembleRegressor", attrs, x,
                         [("Y", TensorProto.FLOAT, ["N", targets])])
        found += mismatches(runtime, f"{targets} targets {post} base={n_base}", model, x)
    assert not found, "\n".join(found[:20])


def v5_forest(rng, mode, n_trees, thresholds):
    """TreeEnsemble's node and leaf tables: (node columns, tree_roots, number of leaves).
    No one-leaf trees: onnxruntime and the ONNX reference read a root whose branches name one
    leaf differently (test_tree_and_linear_models_match_onnxruntime.py holds that case)."""
    cols = {k: [] for k in ("featureids", "splits", "modes", "truenodeids", "falsenodeids",
                            "trueleafs", "falseleafs", "missing_value_tracks_true")}
    n_leaves = [0]

    def node(d, depth):
        """(is a leaf, its index in the node or leaf table)"""
        if d == depth or (d > 0 and rng.random() < 0.25):
            n_leaves[0] += 1
            return 1, n_leaves[0] - 1
        i = len(cols["modes"])
        for v in cols.values():
            v.append(0)
        tl, t = node(d + 1, depth)
        fl, f = node(d + 1, depth)
        for k, v in (("featureids", int(rng.integers(F))), ("splits", float(rng.choice(thresholds))),
                     ("modes", mode), ("truenodeids", t), ("falsenodeids", f), ("trueleafs", tl),
                     ("falseleafs", fl), ("missing_value_tracks_true", int(rng.integers(2)))):
            cols[k][i] = v
        return 0, i

    roots = []
    for _ in range(n_trees):
        roots.append(len(cols["modes"]))
        node(0, int(rng.integers(1, 6)))
    return cols, roots, n_leaves[0]


@pytest.mark.parametrize("mode", ORDERED)
def test_one_mode_tree_ensemble_v5_matches_onnxruntime(runtime, mode):
    found = []
    for c, dtype in enumerate([np.float32, np.float64]):
        rng = np.random.default_rng([SEED, 5, ORDERED.index(mode), c])
        thresholds = rng.uniform(-1, 1, 10).astype(np.float32).astype(float)
        cols, roots, n_leaves = v5_forest(rng, ORDERED.index(mode), 6, thresholds)
        real = ELEM[dtype]
        attrs = {f"nodes_{k}": v for k, v in cols.items() if k not in ("splits", "modes")}
        attrs.update(
            n_targets=2, aggregate_function=1, post_transform=0, tree_roots=roots,
            nodes_modes=helper.make_tensor("m", TensorProto.UINT8, [len(cols["modes"])],
                                           cols["modes"]),
            nodes_splits=helper.make_tensor("s", real, [len(cols["splits"])],
                                            np.array(cols["splits"], dtype)),
            leaf_targetids=rng.integers(2, size=n_leaves).tolist(),
            leaf_weights=helper.make_tensor("w", real, [n_leaves],
                                            rng.uniform(-1, 1, n_leaves).astype(dtype)))
        x = inputs(rng, thresholds, dtype)
        model = model_of("TreeEnsemble", attrs, x, [("Y", real, ["N", 2])], ml_opset=5)
        found += mismatches(runtime, f"v5 {dtype.__name__}", model, x)
    assert not found, "\n".join(found[:20])
