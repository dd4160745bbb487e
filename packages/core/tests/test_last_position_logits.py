"""last_position_logits: a decoder whose logits output holds only the last position, sliced
right before the final projection. Its logits equal the last position's of the full model, on
the prompt and at every step, on onnxruntime and on nnplug, so greedy decoding gives the same
tokens; the presents are untouched; a model without such a projection is refused by name."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from reference_backend import ReferenceBackend

import nnplug
from nnplug import ModelError
from nnplug.generation import Decoder, generate, last_position_logits
from nnplug_conformance import decoding


@pytest.fixture(scope="module")
def rt():
    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(ReferenceBackend())
    yield r
    r.close()


def ort_session(model: onnx.ModelProto):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("name", decoding.DECODERS)
def test_the_sliced_logits_are_the_last_positions_of_the_full_model(rt, name):
    full = onnx.load(decoding.model_path(name))
    last = last_position_logits(full)
    onnx.checker.check_model(last, full_check=True)
    a, b = Decoder(ort_session(full)), Decoder(ort_session(last))
    prompt = np.array(decoding.PROMPT)
    np.testing.assert_allclose(b.start(prompt), a.start(prompt), rtol=1e-5, atol=1e-6)
    tok = [3]
    for _ in range(4):
        np.testing.assert_allclose(b.step(tok), a.step(tok), rtol=1e-5, atol=1e-6)
    for key, value in a._pasts.items():  # the caches do not change
        np.testing.assert_array_equal(b._pasts[key], value)
    sess = nnplug.InferenceSession(last, providers=["reference"], runtime=rt)
    assert [o.shape[1] for o in sess.get_outputs() if o.name == "logits"] == [1]
    want = generate(ort_session(full), decoding.PROMPT, 8)
    np.testing.assert_array_equal(generate(sess, decoding.PROMPT, 8), want)


def test_a_model_without_a_final_projection_is_refused_naming_it():
    node = helper.make_node("Relu", ["x"], ["logits"], name="not_a_projection")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      [1, "s", 4])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                                         [1, "s", 4])])
    with pytest.raises(ModelError, match="no MatMul projects the hidden states onto 'logits'"
                                         r".*found Relu"):
        last_position_logits(helper.make_model(g))
    g.output[0].name = "scores"
    g.node[0].output[0] = "scores"
    with pytest.raises(ModelError, match="no output 'logits'"):
        last_position_logits(helper.make_model(g))
