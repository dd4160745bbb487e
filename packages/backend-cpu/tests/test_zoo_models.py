"""The model zoo shipped inside the onnx package, end to end on the cpu backend: against the
expected outputs shipped with each model, and with random weights against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import ZOO_MODELS, zoo_expected, zoo_input, zoo_model
from onnx import numpy_helper

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


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """The zoo's weights are ConstantOfShape fills; replace each by random values of its
    shape: He-scaled signed weights for Conv/Gemm kernels (so activations stay O(1)), the
    fill value times U(0.5, 1.5) for everything else (keeps variances and scales positive)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    kernel_of = {}
    for node in g.node:
        if node.op_type in ("Conv", "Gemm") and len(node.input) > 1:
            kernel_of[node.input[1]] = node
    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in inits[node.input[0]]]
            value = 0.0
            for a in node.attribute:
                if a.name == "value":
                    value = float(numpy_helper.to_array(a.t).ravel()[0])
            if node.output[0] in kernel_of:
                user = kernel_of[node.output[0]]
                trans_b = any(a.name == "transB" and a.i for a in user.attribute)
                fan_in = int(np.prod(shape[1:])) if user.op_type == "Conv" or trans_b else shape[0]
                arr = rng.normal(0.0, np.sqrt(2.0 / max(fan_in, 1)), shape)
            else:
                arr = value * rng.uniform(0.5, 1.5, shape) if value else rng.normal(0, 0.1, shape)
            g.initializer.append(numpy_helper.from_array(arr.astype(np.float32), node.output[0]))
            if m.ir_version < 4:  # initializers must also be graph inputs there
                g.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    return m


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
