"""Real exported models (tests/models, made by tests/models/export_models.py): each is loaded
with nnplug on the cpu backend alone and, where it loads, run on seeded random inputs and
compared with onnxruntime, with one worker thread and with the default count.

Every model in the manifest is tried. STATUS says what each one does today: "match" (must load
and match onnxruntime), or the op it stops at while a kernel for it is missing (who is on it in
the comment). A wrong answer fails whatever the list says; a model marked "match" that no
longer loads fails; a model that stops at another op, or loads although listed as stopping, is
reported (update the list) but does not fail. The per-model table is printed at the end."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nnplug

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
with open(os.path.join(HERE, "manifest.json")) as _f:
    MANIFEST = json.load(_f)

MATCH = "match"
STATUS = {
    # scikit-learn: the ai.onnx.ml kernels of this package
    "skl_decision_tree": MATCH,
    "skl_gradient_boosting_binary": MATCH,
    "skl_gradient_boosting_classifier": MATCH,
    "skl_gradient_boosting_regressor": MATCH,
    "skl_imputer_scaler_forest": MATCH,
    "skl_linear_regression": MATCH,
    "skl_linear_svc": MATCH,
    "skl_logistic_regression_binary": MATCH,
    "skl_logistic_regression_multi": MATCH,
    "skl_minmax_binarizer_tree": MATCH,
    "skl_normalizer_logistic": MATCH,
    "skl_onehot_pipeline": MATCH,
    "skl_string_columns_pipeline": MATCH,  # string columns in, string labels out
    "skl_random_forest_binary": MATCH,
    "skl_random_forest_classifier": MATCH,
    "skl_random_forest_regressor": MATCH,
    "skl_scaler_logistic": MATCH,
    "skl_svc_poly_binary": MATCH,
    "skl_svc_rbf_proba": MATCH,
    "skl_svr": MATCH,
    # ZipMap's sequence of maps is made by the core (a structural op), the rest by this package
    "skl_random_forest_zipmap": MATCH,
    # torchvision-style
    "resnet_tiny": MATCH,
    "efficientnet_tiny": MATCH,
    "mobilenetv3_tiny": MATCH,
    "lraspp_tiny": MATCH,
    "unet_convtranspose_tiny": MATCH,
    "lstm_tiny": MATCH,
    "gru_tiny": MATCH,
    # transformers
    "bert_tiny": MATCH,
    "gpt2_tiny": MATCH,
    "t5_encoder_tiny": MATCH,
    "vit_tiny": MATCH,
    "whisper_encoder_tiny": MATCH,
    # torch's dynamo exporter (opset 18)
    "bert_tiny_dynamo": MATCH,
    "gpt2_tiny_dynamo": MATCH,
}

REPORT: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _print_table(request):
    yield
    tr = request.config.pluginmanager.getplugin("terminalreporter")
    if tr is None or not REPORT:
        return
    tr.write_line("")
    tr.write_line(f"exported models on the cpu backend ({len(REPORT)} of {len(MANIFEST)}):")
    for name in sorted(REPORT):
        tr.write_line(f"  {name:34s} {REPORT[name]}")


def make_inputs(spec: list[dict], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in spec:
        shape, dt, kind = s["shape"], np.dtype(s["dtype"]), s["kind"]
        if kind.startswith("strings:"):  # strings:<the values to draw from, comma-separated>
            feeds[s["name"]] = rng.choice(kind[8:].split(","), shape).astype(object)
            continue
        if kind.startswith("ids:"):
            a = rng.integers(0, int(kind[4:]), shape)
        elif kind == "ones":
            a = np.ones(shape)
        else:
            a = rng.standard_normal(shape)
            if kind == "normal_nan":
                a[rng.random(shape) < 0.1] = np.nan
            elif kind.startswith("cats:"):  # cats:<columns>:<category counts>
                cols, sizes = kind[5:].split(":")
                for c, k in zip(cols.split(","), sizes.split(",")):
                    a[:, int(c)] = rng.integers(0, int(k), shape[0])
        feeds[s["name"]] = a.astype(dt)
    return feeds


def compare(name, got: dict, want: dict):
    for k, w in want.items():
        g = got[k]
        if isinstance(w, list):  # ZipMap: a sequence of {label: probability}
            assert len(g) == len(w) and all(list(a) == list(b) for a, b in zip(g, w)), f"{name}/{k}"
            g = np.array([list(m.values()) for m in g], np.float32)
            w = np.array([list(m.values()) for m in w], np.float32)
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name}/{k}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "biuO":  # O: string labels
            np.testing.assert_array_equal(g, w, err_msg=f"{name}/{k}")
        else:
            scale = float(np.nanmax(np.abs(w))) if w.size else 1.0
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(scale, 1e-6), err_msg=f"{name}/{k}")


def declined_op(err: Exception) -> str | None:
    m = re.search(r"\(op (\w+), domain", str(err))
    return m.group(1) if m else None


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_exported_model(rt, name):
    entry = MANIFEST[name]
    expected = STATUS.get(name, "not listed")
    model = onnx.load(os.path.join(HERE, entry["file"]))
    feeds = make_inputs(entry["inputs"], seed=sum(map(ord, name)))
    try:
        net = rt.load(model, backends=["cpu"])
    except nnplug.UnsupportedNodeError as e:
        op = declined_op(e)
        REPORT[name] = f"declined at {op}" + ("" if op == expected else f"  (list says {expected})")
        if expected == MATCH:
            pytest.fail(f"{name} is expected to load and match onnxruntime: {e}")
        return
    except nnplug.NnplugError as e:
        REPORT[name] = f"load error: {str(e)[:80]}"
        if expected == MATCH:
            raise
        return
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    lib = rt.backends["cpu"].backend
    with net:
        try:
            for threads in (0, 1):
                lib.set_num_threads(threads)
                compare(name, net.run(feeds), want)
        except AssertionError:
            REPORT[name] = "WRONG ANSWER"
            raise
        finally:
            lib.set_num_threads(0)
    REPORT[name] = "loads, matches onnxruntime" + ("" if expected == MATCH else f"  (list says {expected}: update)")
