"""scikit-learn tree ensembles (and linear and SVM models) exported by skl2onnx: nnplug beside
onnxruntime, batch 1 and 1,000.

    python benchmarks/trees.py [--threads 1] [--rounds 7] [--only GBC] [--no-zipmap]

Models (trained on a seeded synthetic problem with 20 features): GradientBoostingClassifier
(binary, 4 classes, string labels), GradientBoostingRegressor, HistGradientBoostingClassifier,
RandomForestClassifier / Regressor, at several sizes (trees x depth); then LogisticRegression
(binary, 4 classes, behind a StandardScaler), LinearRegression, SVC and SVR (RBF kernel, fitted
on 500 rows: a few hundred support vectors). Classifiers are exported
as skl2onnx writes them by default (TreeEnsembleClassifier, Cast, ZipMap), or without ZipMap
with --no-zipmap. Per model and batch, ``nnplug.InferenceSession.run`` and onnxruntime's
``InferenceSession.run`` (both with ``--threads`` intra-op threads) are timed interleaved in one
process, each turn after a pause and untimed settling runs (benchmarks/zoo.py's time_rounds);
it prints the median microseconds per run and nnplug / onnxruntime, with the load average: on
a shared machine only the ratios of one run compare.
"""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from functools import partial

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import time_rounds as zoo_time_rounds  # noqa: E402 - the zoo benchmark's pacing

F = 20


def _skl2onnx_missing_tracks_as_ints():
    """skl2onnx 1.20 passes HistGradientBoosting's missing_go_to_left (a numpy bool with
    scikit-learn 1.9) to onnx.helper, which refuses booleans in an ints attribute."""
    from skl2onnx.common import tree_ensemble

    add = tree_ensemble.add_node
    if getattr(add, "_ints", False):
        return

    def add_node(*a, nodes_missing_value_tracks_true=0, **k):
        return add(*a, nodes_missing_value_tracks_true=int(nodes_missing_value_tracks_true), **k)

    add_node._ints = True
    tree_ensemble.add_node = add_node


def data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, F)).astype(np.float32)
    s = X[:, 0] + 0.5 * X[:, 1] * X[:, 2] - X[:, 3] + 0.3 * rng.standard_normal(n)
    return X, s


def models():
    from sklearn import ensemble as E

    X, s = data()
    y2 = (s > 0).astype(np.int64)
    y4 = np.digitize(s, np.quantile(s, [0.25, 0.5, 0.75])).astype(np.int64)
    out = []
    for t, d in ((10, 3), (100, 3), (300, 5)):
        out.append((f"GBC binary {t}x{d}", E.GradientBoostingClassifier(n_estimators=t, max_depth=d),
                    y2))
    out.append(("GBC 4 classes 100x3", E.GradientBoostingClassifier(n_estimators=100, max_depth=3),
                y4))
    out.append(("GBC string labels 100x3",
                E.GradientBoostingClassifier(n_estimators=100, max_depth=3),
                np.where(y2 == 1, "yes", "no")))
    for t, d in ((10, 3), (100, 5)):
        out.append((f"GBR {t}x{d}", E.GradientBoostingRegressor(n_estimators=t, max_depth=d), s))
    for t in (10, 100):
        out.append((f"HGBC binary {t} iters", E.HistGradientBoostingClassifier(max_iter=t), y2))
    out.append(("HGBC 4 classes 50 iters", E.HistGradientBoostingClassifier(max_iter=50), y4))
    for t, d in ((10, 4), (100, 8), (300, 8)):
        out.append((f"RFC {t}x{d}", E.RandomForestClassifier(n_estimators=t, max_depth=d,
                                                            random_state=0), y2))
    for t, d in ((10, 4), (100, 8)):
        out.append((f"RFR {t}x{d}", E.RandomForestRegressor(n_estimators=t, max_depth=d,
                                                           random_state=0), s))
    from sklearn.linear_model import LinearRegression, LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import SVC, SVR

    out += [("LogReg binary", LogisticRegression(max_iter=500), y2),
            ("LogReg 4 classes", LogisticRegression(max_iter=500), y4),
            ("Scaler + LogReg", make_pipeline(StandardScaler(), LogisticRegression(max_iter=500)),
             y2),
            ("LinearRegression", LinearRegression(), s),
            ("SVC rbf (500 rows)", SVC(probability=True), y2),
            ("SVR rbf (500 rows)", SVR(), s)]
    return X, out


def time_rounds(runners: dict, rounds: int, per_round: int) -> dict:
    """zoo.py's interleaved timing, in microseconds."""
    return {name: ms * 1e3 for name, ms in zoo_time_rounds(runners, rounds, per_round).items()}


def same(got, want, name):
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: a list of dicts
            g = np.array([[d[k] for k in sorted(d)] for d in g])
            w = np.array([[d[k] for k in sorted(d)] for d in w])
        g, w = np.asarray(g), np.asarray(w)
        if w.dtype.kind in "iuUO":
            assert (g == w).all(), name
        else:
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6, err_msg=name)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--only", default="", help="run the models whose name contains this")
    ap.add_argument("--no-zipmap", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("NNPLUG_CPU_THREADS", str(args.threads))
    warnings.filterwarnings("ignore")
    import onnxruntime as ort
    from skl2onnx import to_onnx

    import nnplug

    _skl2onnx_missing_tracks_as_ints()
    rt = nnplug.Runtime()
    X, todo = models()
    print(f"load average {os.getloadavg()[0]:.2f} at the start; threads {args.threads}, "
          f"{args.rounds} rounds, medians; zipmap {'off' if args.no_zipmap else 'on'}")
    print(f"{'model':<26}{'batch':>6}{'nnplug us':>11}{'ort us':>10}{'ratio':>7}{'load':>6}")
    for name, est, y in todo:
        if args.only and args.only not in name:
            continue
        if "500 rows" in name:  # a kernel machine keeps a share of its rows as vectors
            est.fit(X[:500], y[:500])
        else:
            est.fit(X, y)
        opts = {id(est): {"zipmap": False}} if args.no_zipmap and hasattr(est, "classes_") else None
        data_ = to_onnx(est, X[:1], options=opts).SerializeToString()
        so = ort.SessionOptions()
        so.intra_op_num_threads = args.threads
        so.log_severity_level = 3
        ref = ort.InferenceSession(data_, so, providers=["CPUExecutionProvider"])
        nso = nnplug.SessionOptions()
        nso.intra_op_num_threads = args.threads
        sess = nnplug.InferenceSession(data_, nso, providers=["cpu"], runtime=rt)
        iname = ref.get_inputs()[0].name
        for batch in (1, 1000):
            feeds = {iname: np.random.default_rng(batch).standard_normal((batch, F)).astype(np.float32)}
            same(sess.run(None, feeds), ref.run(None, feeds), name)
            per_round = max(5, min(2000, int(2e4 / batch)))
            t = time_rounds({"nnplug": partial(sess.run, None, feeds),
                             "ort": partial(ref.run, None, feeds)}, args.rounds, per_round)
            print(f"{name:<26}{batch:>6}{t['nnplug']:>11.1f}{t['ort']:>10.1f}"
                  f"{t['nnplug'] / t['ort']:>7.2f}{os.getloadavg()[0]:>6.2f}", flush=True)
        sess.close()
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
