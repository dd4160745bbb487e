"""Light-zoo models (onnx's test data, run on random inputs) on onednn with cpu taking the
rest, against onnxruntime."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from conftest import BACKENDS, assert_matches, onnxruntime_run, zoo_input, zoo_model

MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
          "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def with_logits(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """The model with the input of a final Softmax as an extra output, and that name."""
    last = model.graph.node[-1]
    if last.op_type != "Softmax":
        return model, None
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output.append(inferred[last.input[0]])
    return out, last.input[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_zoo_model_matches_onnxruntime(rt, name):
    model, logits = with_logits(zoo_model(name))
    inp, x = zoo_input(model, seed=3)
    want = onnxruntime_run(model, {inp: x})
    with rt.load(model, backends=BACKENDS) as net:
        placed = collections.Counter(net.assignment.values())
        got = net.run({inp: x})
        names = [o.name for o in net.outputs]
    assert placed["onednn"] > placed["cpu"], f"{name}: onednn ran only {dict(placed)}"
    by_name = dict(zip(names, want))
    for n in names:
        if logits and n != logits and np.abs(by_name[logits]).max() > 1e4:
            # Random weights can give logits of 1e9 and more, where one float32 ulp exceeds 1
            # and the softmax of two correct runs differ completely: compare the logits only.
            continue
        assert_matches(got[n], by_name[n], what=f"{name}:{n}")
