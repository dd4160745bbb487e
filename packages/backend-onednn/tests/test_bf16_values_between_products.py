"""Under the bf16 hint on AMX, values that only reach bf16 products are stored in bf16: a
convolution's or dense layer's result read by convolutions, Concats, pools and per-channel
multiply-adds (a BatchNormalization after a Concat, as in DenseNet), which keep it in bf16 on
the way; a residual sum and the value it adds, where the sum's readers allow it. A value any
other op reads and the kernel's output stay float32.

Tolerance: 3e-2 of the output's range against onnxruntime's float32, the bound the attention's
bf16 products are held to; storing a value in bf16 rounds it once where its reader would
round it anyway, or once more before the multiply-add that the reader's rounding follows."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import AMX, assert_matches, onednn_log, run_both
from onnx import TensorProto, helper, numpy_helper

BF16 = {"onednn": {"kind": "onednn", "precision": "bf16"}}


def model_of(nodes, inits, x_shape, y_shape, seed):
    """(model, feeds): nodes from input x to output y, inits as initializers, x random."""
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(seed).standard_normal(x_shape).astype(np.float32)
    return model, {"x": x}


def dense_block_model():
    """A first convolution and max pool, two DenseNet layers (BatchNormalization, Relu, 1x1
    and 3x3 convolutions, the Concat of every earlier result), a transition (multiply-add, 1x1
    convolution, average pool) into a residual block, then a multiply-add, a global pool and
    a dense layer."""
    rng = np.random.default_rng(3)
    inits = {}

    def init(name, *shape, scale=1.0, offset=0.0):
        inits[name] = (rng.standard_normal(shape) * scale + offset).astype(np.float32)
        return name

    def bn(x, c, y):
        n = f"bn_{y}"
        return helper.make_node("BatchNormalization", [
            x, init(n + "_s", c, scale=0.2, offset=1.0), init(n + "_b", c, scale=0.2),
            init(n + "_m", c, scale=0.2), init(n + "_v", c, scale=0.1, offset=1.0)], [y])

    def conv(x, cin, cout, k, y):
        return helper.make_node("Conv", [x, init(f"w_{y}", cout, cin, k, k,
                                                 scale=(2.0 / (cin * k * k)) ** 0.5)], [y],
                                pads=[k // 2] * 4)

    relu = lambda x, y: helper.make_node("Relu", [x], [y])  # noqa: E731
    nodes = [conv("x", 3, 16, 3, "stem"), relu("stem", "stem_r"),
             helper.make_node("MaxPool", ["stem_r"], ["p"], kernel_shape=[2, 2], strides=[2, 2])]
    feats, c = ["p"], 16
    for i in range(2):  # DenseNet layers: growth 16
        cat = feats[0] if len(feats) == 1 else f"cat{i}"
        if len(feats) > 1:
            nodes.append(helper.make_node("Concat", list(feats), [cat], axis=1))
        nodes += [bn(cat, c, f"n{i}"), relu(f"n{i}", f"a{i}"), conv(f"a{i}", c, 32, 1, f"b{i}"),
                  relu(f"b{i}", f"br{i}"), conv(f"br{i}", 32, 16, 3, f"g{i}")]
        feats.append(f"g{i}")
        c += 16
    nodes += [helper.make_node("Concat", list(feats), ["cat_all"], axis=1),
              bn("cat_all", c, "nt"), relu("nt", "at"), conv("at", c, 32, 1, "ct"),
              helper.make_node("AveragePool", ["ct"], ["t"], kernel_shape=[2, 2], strides=[2, 2]),
              conv("t", 32, 32, 3, "r1"), relu("r1", "r1r"), conv("r1r", 32, 32, 3, "r2"),
              helper.make_node("Add", ["r2", "t"], ["res"]), relu("res", "resr"),
              bn("resr", 32, "nf"), relu("nf", "af"),
              helper.make_node("GlobalAveragePool", ["af"], ["gp"]),
              helper.make_node("Flatten", ["gp"], ["fl"]),
              helper.make_node("MatMul", ["fl", init("fc", 32, 10, scale=0.2)], ["y"])]
    return model_of(nodes, inits, [1, 3, 32, 32], [1, 10], seed=4)


def test_concats_and_multiply_adds_keep_bf16_between_products():
    """oneDNN's log of one run: the first convolution (3 channels, from the input converted to
    nhwc bf16: AMX's kernel), its max pool, the Concats and the multiply-adds after them write
    bf16 and no reorder comes between them and the convolutions; the transition's result,
    which the residual sum adds, the sum and the last multiply-add (read by the global pool
    before a Flatten) stay float32 (a multiply-add or pool writes its input's type)."""
    lines = onednn_log("from test_bf16_values_between_products import dense_block_model\n"
                       "model, feeds = dense_block_model()", env={"NNPLUG_PRECISION": "bf16"})
    if not AMX:
        assert not any("dst_bf16" in ln for ln in lines), lines
        return

    def types(ln):  # (source type, destination type) of a log line
        return re.search(r"src_(\w+?):", ln)[1], re.search(r"dst_(\w+?):", ln)[1]

    def dst(kind):
        return [types(ln)[1] for ln in lines if ln.split(",")[3] == kind]

    assert dst("concat") == ["bf16"] * 2, dst("concat")
    assert dst("binary") == ["bf16", "bf16", "bf16", "f32"], dst("binary")
    assert dst("pooling") == ["bf16", "f32", "f32"], dst("pooling")
    # the first; the layers' 1x1 and 3x3; the transition's 1x1 (its pool's result is the
    # sum's operand); the residual block's two (the second adds the sum); the dense layer
    assert dst("convolution") == ["bf16"] * 5 + ["f32", "bf16", "f32", "f32"], \
        dst("convolution")
    reorders = [types(ln) + (ln.split(",")[-2],) for ln in lines if ",reorder," in ln
                and ln.split(",")[-2].startswith("1x")]  # activations (weights packed at load)
    # float32 into bf16 for products only: the input, the transition's result, the global
    # pool's; no bf16 value reordered
    assert [r for r in reorders if r[1] == "bf16"] == [
        ("f32", "bf16", "1x3x32x32"), ("f32", "bf16", "1x32x8x8"),
        ("f32", "bf16", "1x32x1x1")], reorders
    assert not [r for r in reorders if r[0] == "bf16"], reorders


def inverted_residual_model():
    """MobileNetV2's block with EfficientNet's squeeze-and-excitation: a 1x1 expansion with
    Relu6, a depthwise 3x3 with its bias and Relu6, its channels scaled by a global pool, two
    1x1 convolutions and a Sigmoid, a 1x1 projection, and a global pool."""
    rng = np.random.default_rng(5)
    c, e = 16, 64
    inits = {"w1": rng.standard_normal((e, c, 1, 1)).astype(np.float32) * 0.25,
             "b1": rng.standard_normal(e).astype(np.float32) * 0.1,
             "wd": rng.standard_normal((e, 1, 3, 3)).astype(np.float32) * 0.3,
             "bd": rng.standard_normal(e).astype(np.float32),
             "w2": rng.standard_normal((c, e, 1, 1)).astype(np.float32) * 0.12,
             "ws1": rng.standard_normal((8, e, 1, 1)).astype(np.float32) * 0.2,
             "ws2": rng.standard_normal((e, 8, 1, 1)).astype(np.float32) * 0.3,
             "lo": np.float32(0), "hi": np.float32(6)}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
             helper.make_node("Clip", ["a", "lo", "hi"], ["ar"]),
             helper.make_node("Conv", ["ar", "wd", "bd"], ["d"], group=e, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["d", "lo", "hi"], ["dr"]),
             helper.make_node("GlobalAveragePool", ["dr"], ["sq"]),
             helper.make_node("Conv", ["sq", "ws1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s1r"]),
             helper.make_node("Conv", ["s1r", "ws2"], ["s2"]),
             helper.make_node("Sigmoid", ["s2"], ["se"]),
             helper.make_node("Mul", ["dr", "se"], ["scaled"]),
             helper.make_node("Conv", ["scaled", "w2"], ["p"]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    return model_of(nodes, inits, [1, c, 28, 28], [1, c, 1, 1], seed=6)


def residual_blocks_model():
    """ResNet's stem and two basic blocks (3x3, Relu, 3x3 whose residual Add and Relu are its
    post-ops), then a 1x1 convolution: the stream between the blocks is read only by
    convolutions and their sums."""
    rng = np.random.default_rng(7)
    c, inits, nodes = 32, {}, []

    def conv(x, cin, k, y):
        inits[f"w_{y}"] = (rng.standard_normal((c, cin, k, k)) * (2.0 / (cin * k * k)) ** 0.5
                           ).astype(np.float32)
        inits[f"b_{y}"] = (rng.standard_normal(c) * 0.1).astype(np.float32)
        nodes.append(helper.make_node("Conv", [x, f"w_{y}", f"b_{y}"], [y], pads=[k // 2] * 4))

    conv("x", 3, 3, "stem")
    nodes.append(helper.make_node("Relu", ["stem"], ["s0"]))
    for i in range(2):
        conv(f"s{i}", c, 3, f"a{i}")
        nodes.append(helper.make_node("Relu", [f"a{i}"], [f"ar{i}"]))
        conv(f"ar{i}", c, 3, f"b{i}")
        nodes += [helper.make_node("Add", [f"b{i}", f"s{i}"], [f"sum{i}"]),
                  helper.make_node("Relu", [f"sum{i}"], [f"s{i + 1}"])]
    conv("s2", c, 1, "y")
    return model_of(nodes, inits, [1, 3, 24, 24], [1, c, 24, 24], seed=8)


def test_a_residual_stream_read_by_convolutions_stays_bf16():
    """oneDNN's log: each block's second convolution adds the block's input (its `sum`
    post-op) and writes bf16, as every convolution but the last (the kernel's output) does;
    nothing is reordered but the input, to bf16 for the first convolution (before, the
    stream was float32 and each block's input was reordered to bf16 for its convolution)."""
    lines = onednn_log("from test_bf16_values_between_products import residual_blocks_model\n"
                       "model, feeds = residual_blocks_model()", env={"NNPLUG_PRECISION": "bf16"})
    convs = [ln for ln in lines if ",convolution," in ln]
    assert len(convs) == 6, lines
    if not AMX:
        assert not any("dst_bf16" in ln for ln in lines), lines
        return
    sums = [ln for ln in convs if "sum" in ln]
    assert len(sums) == 2 and all("dst_bf16" in ln for ln in sums), sums
    assert ["dst_bf16" in ln for ln in convs] == [True] * 5 + [False], convs
    reorders = [ln for ln in lines if ",reorder," in ln and "bf16" in ln]
    assert len(reorders) == 1 and "1x3x24x24" in reorders[0], reorders


def upsample_model():
    """A U-Net's up path: a convolution, a stride-2 ConvTranspose, the Concat of its result and
    a skip (an average pool's input), a 3x3 convolution."""
    rng = np.random.default_rng(9)
    inits = {"w0": rng.standard_normal((32, 3, 3, 3)) * 0.3,
             "wt": rng.standard_normal((32, 16, 2, 2)) * 0.25,
             "bt": rng.standard_normal(16) * 0.1,
             "w1": rng.standard_normal((16, 48, 3, 3)) * 0.08}
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    nodes = [helper.make_node("Conv", ["x", "w0"], ["skip"], pads=[1] * 4),
             helper.make_node("AveragePool", ["skip"], ["down"], kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("ConvTranspose", ["down", "wt", "bt"], ["up"], strides=[2, 2]),
             helper.make_node("Concat", ["up", "skip"], ["cat"], axis=1),
             helper.make_node("Conv", ["cat", "w1"], ["y"], pads=[1] * 4)]
    return model_of(nodes, inits, [1, 3, 16, 16], [1, 16, 16, 16], seed=10)


def test_a_conv_transpose_between_products_reads_and_writes_bf16():
    """oneDNN's log: the ConvTranspose reads the pool's bf16 result and writes bf16 for the
    Concat, which the last convolution reads in bf16; nothing is reordered into or out of
    bf16 but the input (its input and result were float32, each a reorder)."""
    lines = onednn_log("from test_bf16_values_between_products import upsample_model\n"
                       "model, feeds = upsample_model()", env={"NNPLUG_PRECISION": "bf16"})
    deconv = [ln for ln in lines if ",deconvolution," in ln]
    assert len(deconv) == 1, lines
    if not AMX:
        assert "src_f32" in deconv[0] and "dst_f32" in deconv[0], deconv
        return
    assert "src_bf16" in deconv[0] and "dst_bf16" in deconv[0], deconv
    reorders = [ln for ln in lines if ",reorder," in ln and "bf16" in ln]
    assert len(reorders) == 1 and "1x3x16x16" in reorders[0], reorders


MODELS = {"dense block": dense_block_model, "inverted residual": inverted_residual_model,
          "residual blocks": residual_blocks_model, "upsampling": upsample_model}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", list(MODELS))
def test_blocks_in_bf16_stay_within_their_bound_of_onnxruntime(rt, name, threads):
    model, feeds = MODELS[name]()
    placed, got, want = run_both(rt, model, feeds, threads, targets=BF16)
    assert set(placed.values()) == {"onednn"}, placed
    assert_matches(got[0], want[0], rtol=3e-2, what=f"{name} under the bf16 hint")


def test_a_bf16_depthwise_convolution_takes_its_bias_as_a_post_op():
    """On AMX, the depthwise convolution between two bf16 values runs on oneDNN's brgemm
    depthwise kernel, which takes a bias of the data's type only: its float32 bias is the
    first post-op (a per-channel add, the same float32 sum), then the Relu6. Its result stays
    bf16 through the squeeze-and-excitation's pool and scale (a binary op of a broadcast
    float32 operand), and no reorder converts it for the projection."""
    lines = onednn_log("from test_bf16_values_between_products import inverted_residual_model\n"
                       "model, feeds = inverted_residual_model()", env={"NNPLUG_PRECISION": "bf16"})
    dw = [ln for ln in lines if ",convolution," in ln and "g64" in ln]
    assert len(dw) == 1, lines
    if not AMX:
        assert "bia_f32" in dw[0] and "attr-fpmath:bf16" in dw[0], dw
        return
    assert "brdgmm_dw" in dw[0] and "src_bf16" in dw[0] and "dst_bf16" in dw[0], dw
    assert "bia_undef" in dw[0] and "attr-post-ops:binary_add:f32:2+eltwise_clip" in dw[0], dw
    scale = [ln for ln in lines if ",binary," in ln]
    assert len(scale) == 1 and "src_bf16" in scale[0] and "dst_bf16" in scale[0], scale
    assert "src_bf16" in next(ln for ln in lines if ",pooling," in ln), lines
    assert not [ln for ln in lines if ",reorder," in ln and "1x64x28x28" in ln], lines
