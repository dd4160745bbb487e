"""What a body cannot be written for is a load error naming the node, the op, the plugin and
what to change, never a wrong answer."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import model_of
from test_ops_match_onnxruntime import _nbits, attention_case, const, f

import nnplug

CASES = {
    "Attention 4-D mask": (attention_case(lambda P: np.ones((2, 1, 5, 5), np.int32)),
                           r"op Attention.*4-D mask \(input 3\) is not supported"),
    "Attention num_heads": (model_of("Attention", [("x", f(2, 5, 16)), const("w", f(16, 48)),
                                                   const("b", f(48))], ["y"], {"num_heads": 5}),
                            r"op Attention.*num_heads=5 does not divide"),
    "MatMulNBits bits": (model_of("MatMulNBits", [
        ("a", f(3, 32)), const("b", np.zeros((6, 2, 16), np.uint8)),
        const("s", np.ones(12, np.float32))], ["y"],
        {"K": 32, "N": 6, "bits": 3, "block_size": 16}), r"op MatMulNBits.*bits=3"),
    "MatMulNBits g_idx with packed zero points": (
        _nbits(4, zp=True, g_idx=True), r"op MatMulNBits.*g_idx \(input 4\) with packed uint8 "
                                        r"zero_points"),
    "opset 12": (model_of("FastGelu", [("x", f(3))], ["y"], opset=12),
                 r"op FastGelu.*need opset 13 or newer"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_unsupported_input_is_a_model_error_naming_node_op_and_plugin(case, runtime):
    (model, _), pattern = CASES[case]
    with pytest.raises(nnplug.ModelError, match=r"node 'node' \(" + pattern) as e:
        runtime.load(model, backends=["cpu"])
    assert "nnplug-ops-contrib" in str(e.value)
