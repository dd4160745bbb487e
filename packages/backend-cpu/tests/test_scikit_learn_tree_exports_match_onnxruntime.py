"""scikit-learn tree ensembles as skl2onnx exports them (TreeEnsembleClassifier/Regressor,
Cast or Identity on the labels, ZipMap) give onnxruntime's labels and scores on the cpu
backend, at 1 and 2 threads, at batch 1, 7 and 203 (several 64-row blocks of the kernel):
gradient boosting (binary, 3 classes, regression), histogram gradient boosting trained with
missing values (its missing-value tracks, NaN inputs), random forests (classes,
regression), with int64 and string class labels, with and without ZipMap.

onnxruntime runs 40-row slices with one thread, where it adds each row's trees in tree order in
float32 as the cpu kernel does, so labels are equal and sums agree to the last bit; the
LOGISTIC and SOFTMAX of the probabilities differ by a few ulps between the two builds' exp:
rtol 1e-5, atol 1e-6 for probabilities near 0.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import nnplug
import nnplug_backend_cpu

ensemble = pytest.importorskip("sklearn.ensemble")
skl2onnx = pytest.importorskip("skl2onnx")

F, SLICE = 8, 40


def _missing_tracks_as_ints():
    """skl2onnx 1.20 hands HistGradientBoosting's missing_go_to_left (a numpy bool with recent
    scikit-learn) to onnx.helper, which refuses booleans in an ints attribute."""
    from skl2onnx.common import tree_ensemble

    add = tree_ensemble.add_node
    if getattr(add, "ints_only", False):
        return

    def add_node(*a, nodes_missing_value_tracks_true=0, **k):
        return add(*a, nodes_missing_value_tracks_true=int(nodes_missing_value_tracks_true), **k)

    add_node.ints_only = True
    tree_ensemble.add_node = add_node


def training_data(nan):
    rng = np.random.default_rng(20261205)
    X = rng.standard_normal((600, F)).astype(np.float32)
    s = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] - X[:, 3]
    if nan:
        X[rng.random(X.shape) < 0.1] = np.nan
    return X, s


def estimators():
    E = ensemble
    s3 = lambda s: np.digitize(s, [-0.5, 0.5])  # noqa: E731
    return {
        "gbc binary": (E.GradientBoostingClassifier(n_estimators=20, max_depth=3), lambda s: s > 0, False),
        "gbc 3 classes": (E.GradientBoostingClassifier(n_estimators=10, max_depth=4), s3, False),
        "gbc string labels": (E.GradientBoostingClassifier(n_estimators=10, max_depth=3),
                              lambda s: np.where(s > 0, "yes", "no"), False),
        "gbr": (E.GradientBoostingRegressor(n_estimators=20, max_depth=5), lambda s: s, False),
        "hgbc binary, NaN": (E.HistGradientBoostingClassifier(max_iter=15), lambda s: s > 0, True),
        "hgbc 3 classes, NaN": (E.HistGradientBoostingClassifier(max_iter=8), s3, True),
        "hgbr, NaN": (E.HistGradientBoostingRegressor(max_iter=15), lambda s: s, True),
        "rfc 3 string classes": (E.RandomForestClassifier(n_estimators=12, max_depth=6, random_state=0),
                                 lambda s: np.array(["a", "b", "c"])[s3(s)], False),
        "rfr": (E.RandomForestRegressor(n_estimators=12, max_depth=8, random_state=0),
                lambda s: s, False),
    }


@pytest.fixture(scope="module")
def runtime():
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(nnplug_backend_cpu.library_path())
    yield r
    r.backends["cpu"].backend.set_num_threads(0)


def as_arrays(value):
    """An output as arrays: ZipMap's list of dicts becomes a [rows, labels] array."""
    if isinstance(value, list):
        keys = sorted(value[0]) if value else []
        return np.array([[d[k] for k in keys] for d in value]), keys
    return np.asarray(value), None


def differences(got, want, where):
    found = []
    for k, (g, w) in enumerate(zip(got, want)):
        (g, gk), (w, wk) = as_arrays(g), as_arrays(w)
        if g.shape != w.shape or gk != wk or (g.dtype.kind != "O") != (w.dtype.kind != "O"):
            found.append(f"{where}, output {k}: {g.dtype}{g.shape} {gk}, onnxruntime "
                         f"{w.dtype}{w.shape} {wk}")
        elif w.dtype.kind in "iuOUb":
            if not (g == w).all():
                found.append(f"{where}, output {k}: labels differ at rows "
                             f"{np.flatnonzero(g != w)[:6].tolist()}")
        elif not np.allclose(g, w, rtol=1e-5, atol=1e-6):
            r = int(np.argwhere(~np.isclose(g, w, rtol=1e-5, atol=1e-6))[0][0])
            found.append(f"{where}, output {k}: row {r}: {g[r].tolist()} vs {w[r].tolist()}")
    return found


@pytest.mark.parametrize("zipmap", [True, False], ids=["as exported", "no zipmap"])
@pytest.mark.parametrize("name", list(estimators()))
def test_scikit_learn_export_matches_onnxruntime(runtime, name, zipmap):
    est, target, nan = estimators()[name]
    if not zipmap and not hasattr(est, "predict_proba"):
        pytest.skip("a regressor has no ZipMap to leave out")
    _missing_tracks_as_ints()
    X, s = training_data(nan)
    est.fit(X, target(s))
    options = None if zipmap else {id(est): {"zipmap": False}}
    model = skl2onnx.to_onnx(est, X[:1], options=options)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    ref = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    lib = runtime.backends["cpu"].backend
    found = []
    with runtime.load(model, backends=["cpu"]) as net:
        name_in = net.inputs[0].name
        for rows in (1, 7, 203):
            x = np.random.default_rng(rows).standard_normal((rows, F)).astype(np.float32)
            if nan:
                x[np.random.default_rng(rows + 1).random(x.shape) < 0.15] = np.nan
            parts = [ref.run(None, {name_in: x[i:i + SLICE]}) for i in range(0, rows, SLICE)]
            want = [sum((p[k] for p in parts), []) if isinstance(parts[0][k], list)
                    else np.concatenate([p[k] for p in parts]) for k in range(len(parts[0]))]
            for threads in (1, 2):
                lib.set_num_threads(threads)
                out = net.run({name_in: x})
                found += differences([out[o.name] for o in net.outputs], want,
                                     f"{rows} rows, {threads} thread(s)")
    assert not found, "\n".join(found[:20])
