"""The model zoo shipped inside the onnx package, end to end on the cpu backend: against the
expected outputs shipped with each model, and with random weights against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import ZOO_MODELS, zoo_expected, zoo_input, zoo_model

from nnplug_conformance.zoo import randomize_weights

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_model_matches_shipped_output(rt, name):
    model = zoo_model(name)
    # the zoo's constant weights make the output independent of the input
    inp, x = zoo_input(model)
    expected = zoo_expected(name)
    feeds = {inp: x}
    with rt.load(model, backends=["cpu"]) as net:
        assert {a.split()[0] for a in net.assignment.values()} == {"cpu"}
        got = net.run(feeds)[net.outputs[0].name]
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-7)


@pytest.mark.parametrize("name", ZOO_MODELS)
def test_zoo_model_with_random_weights_matches_onnxruntime(rt, name):
    import onnxruntime as ort

    model = randomize_weights(zoo_model(name), seed=7)
    inp, x = zoo_input(model, seed=3)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    want = sess.run(None, {inp: x})
    with rt.load(model, backends=["cpu"]) as net:
        assert {a.split()[0] for a in net.assignment.values()} == {"cpu"}
        out = net.run({inp: x})
        got = [out[o.name] for o in net.outputs]
    for g, w in zip(got, want):
        assert g.shape == w.shape
        scale = float(np.abs(w).max())
        err = float(np.abs(g - w).max())
        assert err <= 1e-4 * scale, f"{name}: max error {err:.3g} vs max |output| {scale:.3g}"
        assert np.argmax(g) == np.argmax(w)
