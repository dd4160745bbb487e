"""The list of standard op types nnplug keeps (so that registering a custom op needs no onnx)
is the installed onnx's."""

import onnx.defs

from nnplug.customop import is_standard_op
from nnplug.onnx_ops import STANDARD_OPS, from_onnx


def test_the_standard_op_list_is_the_installed_onnx_s():
    missing = sorted(from_onnx() - STANDARD_OPS)
    extra = sorted(STANDARD_OPS - from_onnx())
    assert not missing and not extra, (
        f"nnplug/onnx_ops.py differs from onnx {onnx.__version__}: missing {missing}, not in "
        f"onnx {extra}; regenerate STANDARD_OPS with nnplug.onnx_ops.from_onnx()")


def test_is_standard_op_answers_as_onnx_does():
    for op_type in ["Relu", "ArgMax", "LayerNormalization", "Scan", "cstSoftmax", "relu", "",
                    "LinearClassifier"]:  # the last is ai.onnx.ml's, not the default domain's
        assert is_standard_op(op_type) == onnx.defs.has(op_type, ""), op_type
