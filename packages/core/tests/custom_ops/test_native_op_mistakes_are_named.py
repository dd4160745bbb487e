"""Mistakes in C custom ops are caught and named: a standard op's name (Swish) takes ai.onnx
nodes only with NNP_OP_OVERRIDES_STANDARD (custom-op ABI 1.1), as a Python op needs
override=True; a callback that fails without a message says which status it returned and that
the op gave no message; a shape_infer that reports the wrong rank is caught, static shapes or
symbolic, and blamed on the op library."""

import os
import shutil
import subprocess

import numpy as np
import pytest
from onnx import TensorProto, helper

import nnplug

SOURCE = r"""
#include <nnplug/custom_op.h>
#include <math.h>

static int32_t swish(nnp_op_context* ctx, const nnp_op_tensor* in, uint32_t n_in,
                     const nnp_op_tensor* out, uint32_t n_out) {
  (void)ctx; (void)n_in; (void)n_out;
  const float* x = nnp_op_tensor_data(&in[0]);
  float* y = nnp_op_tensor_data(&out[0]);
  for (uint64_t i = 0; i < in[0].attr.n_elems; ++i) y[i] = x[i] / (1.0f + expf(-x[i]));
  return 0;
}

static int32_t silent_failure(nnp_op_context* ctx, const nnp_op_tensor* in, uint32_t n_in,
                              const nnp_op_tensor* out, uint32_t n_out) {
  (void)ctx; (void)in; (void)n_in; (void)out; (void)n_out;
  return NNP_STATUS_SHAPE_ERROR; /* and no ctx->set_error */
}

static int32_t same_shape(nnp_op_context* ctx, const nnp_op_tensor* in, uint32_t n_in,
                          nnp_op_tensor* out, uint32_t n_out) {
  (void)ctx; (void)n_in; (void)n_out;
  out[0].attr = in[0].attr;
  return 0;
}

static int32_t one_rank_too_many(nnp_op_context* ctx, const nnp_op_tensor* in, uint32_t n_in,
                                 nnp_op_tensor* out, uint32_t n_out) {
  (void)ctx; (void)n_in; (void)n_out;
  out[0].attr = in[0].attr;
  out[0].attr.dims[out[0].attr.n_dims++] = 1; /* wrong: the output has the input's rank */
  return 0;
}

static int32_t copy(nnp_op_context* ctx, const nnp_op_tensor* in, uint32_t n_in,
                    const nnp_op_tensor* out, uint32_t n_out) {
  (void)ctx; (void)n_in; (void)n_out;
  const float* x = nnp_op_tensor_data(&in[0]);
  float* y = nnp_op_tensor_data(&out[0]);
  for (uint64_t i = 0; i < in[0].attr.n_elems && i < out[0].attr.n_elems; ++i) y[i] = x[i];
  return 0;
}

#ifndef FLAGS
#define FLAGS 0
#endif
#ifndef MINOR
#define MINOR NNP_CUSTOM_OP_ABI_MINOR
#endif
#define VERSION {NNP_CUSTOM_OP_ABI_MAJOR, MINOR, 0}
static const nnp_custom_op swish_op = {
    VERSION, sizeof(nnp_custom_op), NNP_OP_TARGET_CPU, "Swish", NULL, NULL, 0, NULL,
    NULL, NULL, swish, NULL, NULL, NULL, FLAGS};
static const nnp_custom_op silent_op = {
    VERSION, sizeof(nnp_custom_op), NNP_OP_TARGET_CPU, "cstSilent", NULL, NULL, 0, NULL,
    NULL, NULL, silent_failure, NULL, NULL, same_shape, 0};
static const nnp_custom_op rank_op = {
    VERSION, sizeof(nnp_custom_op), NNP_OP_TARGET_CPU, "cstWrongRank", NULL, NULL, 0, NULL,
    NULL, NULL, copy, NULL, NULL, one_rank_too_many, 0};
static const nnp_custom_op* const ops[] = {&silent_op, &rank_op, &swish_op};
static const nnp_op_library library = {VERSION, sizeof(nnp_op_library), "swishlib",
                                       NUM_OPS, ops};
NNP_EXPORT const nnp_op_library* nnp_custom_op_entry(const nnp_version* host_abi) {
  (void)host_abi;
  return &library;
}
"""


def compiler_or_skip() -> str:
    cc = shutil.which(os.environ.get("CC", "cc"))
    if cc is None:
        if os.environ.get("NNPLUG_REQUIRE_NATIVE") == "1":
            pytest.fail("no C compiler (cc) and NNPLUG_REQUIRE_NATIVE=1")
        pytest.skip("no C compiler (cc)")
    return cc


def _build(tmp_path, name, *flags):
    src = tmp_path / "swish.c"
    src.write_text(SOURCE)
    out = tmp_path / f"libnnplug_op_{name}.so"
    subprocess.run([compiler_or_skip(), "-std=c11", "-O2", "-fPIC", "-shared",
                    "-fvisibility=hidden", "-Wall", "-Werror", f"-I{nnplug.get_include()}",
                    *flags, str(src), "-o", str(out), "-lm"], check=True)
    return str(out)


def _model(op_type="Swish", domain="", shape=(4,)):
    node = helper.make_node(op_type, ["x"], ["y"], name="node", domain=domain)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    opsets = [helper.make_opsetid("", 24)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    return helper.make_model(g, opset_imports=opsets)


@pytest.mark.parametrize("minor", ["NNP_CUSTOM_OP_ABI_MINOR", "0"])
def test_a_standard_op_name_without_the_flag_is_refused(tmp_path, minor):
    lib = _build(tmp_path, "swish", "-DNUM_OPS=3", f"-DMINOR={minor}")
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        with pytest.raises(nnplug.PluginError) as e:
            rt.register_custom_ops_library(lib)
        assert "Swish" not in rt.ops
    msg = str(e.value)
    assert "'Swish' is the name of a standard ONNX operator" in msg, msg
    assert "NNP_OP_OVERRIDES_STANDARD" in msg, msg


def test_with_the_flag_it_overrides_the_standard_op(tmp_path):
    lib = _build(tmp_path, "swish", "-DNUM_OPS=3", "-DFLAGS=NNP_OP_OVERRIDES_STANDARD")
    x = np.array([-2, -0.5, 0.5, 3], np.float32)
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        rt.register_custom_ops_library(lib)
        with rt.load(_model()) as net:
            assert net.assignment == {"node": "op:Swish@cpu"}
            np.testing.assert_allclose(net.run({"x": x})["y"], x / (1 + np.exp(-x)), rtol=1e-6)


def test_a_failure_without_a_message_names_the_status_and_says_so(tmp_path):
    lib = _build(tmp_path, "silent", "-DNUM_OPS=2")
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        rt.register_custom_ops_library(lib)
        with rt.load(_model("cstSilent", "test.silent")) as net, \
                pytest.raises(nnplug.CustomOpError) as e:
            net.run({"x": np.ones(4, np.float32)})
    msg = str(e.value)
    assert "compute() on node 'node': returned 6 (NNP_STATUS_SHAPE_ERROR)" in msg, msg
    assert "gave no message" in msg and "set_error" in msg, msg


def _rank_model(shape):
    """cstWrongRank (whose shape_infer adds a dim) feeding a Relu, the output declared."""
    op = helper.make_node("cstWrongRank", ["x"], ["t"], name="node", domain="test.rank")
    relu = helper.make_node("Relu", ["t"], ["y"], name="relu")
    g = helper.make_graph([op, relu], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 24),
                                               helper.make_opsetid("test.rank", 1)])


@pytest.mark.parametrize("shape", [(2, 3), ("N", 3)])
@pytest.mark.parametrize("graph_output", [True, False])
def test_a_shape_infer_of_the_wrong_rank_is_caught_and_blamed_on_the_library(
        tmp_path, shape, graph_output):
    from numpy_backend import NumpyBackend

    lib = _build(tmp_path, "rank", "-DNUM_OPS=2")
    model = _model("cstWrongRank", "test.rank", shape) if graph_output else _rank_model(shape)
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        rt.register_custom_ops_library(lib)
        rt.register_backend(NumpyBackend())
        with pytest.raises(nnplug.CustomOpError) as e:
            with rt.load(model) as net:
                net.run({"x": np.ones((2, 3), np.float32)})
    msg = str(e.value)
    assert "'cstWrongRank'" in msg and "libnnplug_op_rank.so" in msg, msg
    assert "shape_infer" in msg and "rank" in msg, msg
    assert "backend 'numpy'" not in msg, msg
