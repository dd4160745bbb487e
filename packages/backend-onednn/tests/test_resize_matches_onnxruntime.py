"""Resize of a 4-D value over its spatial axes runs on the oneDNN backend (oneDNN's
resampling) where oneDNN maps each output position to ONNX's source coordinate: linear with
half_pixel or pytorch_half_pixel to any size (segmentation heads, DeepLab's pooled branch from
1 x 1), nearest by whole factors (PyTorch's Upsample: asymmetric with floor). Both against
onnxruntime at 1 and 2 threads, between convolutions (in their layout) and alone. Every other
form is declined, and the next backend gives onnxruntime's answer."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import AMX, assert_matches, graph_model, onednn_log, run_both
from onnx import helper

R = np.random.default_rng(7)


def rand(*shape, scale=1.0):
    return (R.standard_normal(shape) * scale).astype(np.float32)


def resize_model(shape, attrs, scales=None, sizes=None, convs=True, opset=18, form=None):
    """x -> [Conv 1x1] -> Resize -> [Conv 1x1]; scales or sizes as initializers (opset 11's
    form: roi and scales given as empty initializers beside sizes)."""
    n, c, h, w = shape
    inits = {}
    ins = ["r_in", "", ""]
    if form == "opset 11":
        inits["roi"] = np.zeros((0,), np.float32)
        inits["no_scales"] = np.zeros((0,), np.float32)
        ins = ["r_in", "roi", "no_scales"]
    if scales is not None:
        inits["scales"] = np.array(scales, np.float32)
        ins[2] = "scales"
    if sizes is not None:
        inits["sizes"] = np.array(sizes, np.int64)
        ins.append("sizes")
    while ins[-1] == "":
        ins.pop()
    nodes = []
    if convs:
        inits["w1"] = rand(c, c, 1, 1, scale=0.5)
        inits["w2"] = rand(c, c, 1, 1, scale=0.5)
        nodes.append(helper.make_node("Conv", ["x", "w1"], ["r_in"], name="conv1"))
    else:
        ins[0] = "x"
    nodes.append(helper.make_node("Resize", ins, ["r"], name="resize", **attrs))
    if convs:
        nodes.append(helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2"))
    return graph_model(nodes, {"x": rand(n, c, h, w)}, inits, opset=opset), {"x": rand(n, c, h, w)}


NEAREST_TORCH = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                 "nearest_mode": "floor"}
LINEAR = {"mode": "linear", "coordinate_transformation_mode": "half_pixel"}
LINEAR_PT = {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}

PLACED = {
    "nearest x2, scales (PyTorch's Upsample)": ((1, 16, 8, 8), NEAREST_TORCH, [1, 1, 2, 2], None),
    "nearest x3 by x2, sizes": ((1, 16, 5, 7), NEAREST_TORCH, None, [1, 16, 15, 14]),
    "nearest half_pixel round_prefer_floor x3": (
        (1, 16, 8, 8), {"mode": "nearest"}, None, [1, 16, 24, 24]),
    "nearest half_pixel round_prefer_ceil x2 by x3": (
        (2, 16, 8, 6), {"mode": "nearest", "nearest_mode": "round_prefer_ceil"}, None,
        [2, 16, 16, 18]),
    "linear up by fractions": ((1, 16, 7, 9), LINEAR, None, [1, 16, 20, 13]),
    "linear down by fractions": ((1, 16, 20, 16), LINEAR, None, [1, 16, 7, 5]),
    "linear x2, scales": ((1, 16, 9, 9), LINEAR, [1, 1, 2, 2], None),
    "linear pytorch_half_pixel": ((1, 16, 8, 8), LINEAR_PT, None, [1, 16, 17, 30]),
    "linear from 1 x 1 (a pooled branch)": ((1, 16, 1, 1), LINEAR, None, [1, 16, 9, 11]),
}

DECLINED = {
    "cubic": ((1, 8, 6, 6), {"mode": "cubic"}, None, [1, 8, 12, 12]),
    "linear align_corners": (
        (1, 8, 6, 6), {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
        None, [1, 8, 11, 11]),
    "linear asymmetric": (
        (1, 8, 6, 6), {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
        [1, 1, 2, 2], None),
    "nearest asymmetric round_prefer_floor": (
        (1, 8, 6, 6), {"mode": "nearest", "coordinate_transformation_mode": "asymmetric"},
        [1, 1, 2, 2], None),
    "nearest by 1.5": ((1, 8, 6, 6), NEAREST_TORCH, None, [1, 8, 9, 9]),
    "nearest down by 2": ((1, 8, 6, 6), {"mode": "nearest"}, None, [1, 8, 3, 3]),
    "linear scales 1.5": ((1, 8, 6, 6), LINEAR, [1, 1, 1.5, 1.5], None),
    "linear antialias": ((1, 8, 12, 12), {**LINEAR, "antialias": 1}, None, [1, 8, 5, 5]),
    "nearest tf_half_pixel_for_nn": (
        (1, 8, 6, 6), {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn"},
        [1, 1, 2, 2], None),
    "pytorch_half_pixel to one row": ((1, 8, 6, 6), LINEAR_PT, None, [1, 8, 1, 12]),
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("convs", [True, False], ids=["between convolutions", "alone"])
@pytest.mark.parametrize("case", list(PLACED))
def test_resize_runs_on_onednn_and_matches_onnxruntime(rt, case, convs, threads):
    shape, attrs, scales, sizes = PLACED[case]
    model, feeds = resize_model(shape, attrs, scales, sizes, convs=convs)
    placed, got, want = run_both(rt, model, feeds, threads)
    assert placed["resize"] == "onednn", placed
    assert_matches(got[0], want[0], rtol=1e-5, what=case)
    if attrs["mode"] == "nearest" and not convs:  # copies: the same bits
        assert np.array_equal(got[0], want[0]), case


def test_opset_11_form_with_empty_roi_and_scales(rt):
    model, feeds = resize_model((1, 16, 6, 6), LINEAR, None, [1, 16, 10, 14], opset=11,
                                form="opset 11")
    placed, got, want = run_both(rt, model, feeds, 2)
    assert placed["resize"] == "onednn", placed
    assert_matches(got[0], want[0], rtol=1e-5, what="opset 11")


@pytest.mark.parametrize("case", list(DECLINED))
def test_other_resizes_are_declined_and_still_right(rt, case):
    shape, attrs, scales, sizes = DECLINED[case]
    model, feeds = resize_model(shape, attrs, scales, sizes, opset=19 if case == "linear antialias"
                                else 18)
    placed, got, want = run_both(rt, model, feeds, 2)
    assert placed["resize"] != "onednn", placed
    assert_matches(got[0], want[0], rtol=1e-5, what=case)


def test_under_the_bf16_hint_an_upsample_between_convolutions_stays_bf16():
    """Conv -> Resize (nearest x2) -> Conv under the bf16 hint: on AMX the resampling reads and
    writes bf16, so no reorder comes between it and the convolutions."""
    lines = onednn_log(
        "from test_resize_matches_onnxruntime import resize_model, NEAREST_TORCH\n"
        "model, feeds = resize_model((1, 32, 16, 16), NEAREST_TORCH, [1, 1, 2, 2], None)",
        env={"NNPLUG_PRECISION": "bf16"})
    resampling = [ln for ln in lines if ",resampling," in ln]
    assert len(resampling) == 1, lines
    if AMX:
        assert "src_bf16" in resampling[0] and "dst_bf16" in resampling[0], resampling
        assert not [ln for ln in lines if ",reorder," in ln and "src_bf16" in ln], lines
    else:
        assert "bf16" not in resampling[0], resampling
