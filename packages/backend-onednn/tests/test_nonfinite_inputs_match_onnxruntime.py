"""NaN, infinities, -0.0, denormals and values near float32's limits through every op this
backend claims and the chains it fuses (nnplug_conformance.nonfinite), at 1 and 2 threads: the
answer is onnxruntime's (or, where onnxruntime's depends on its kernel, the op's formula). A run
whose inputs hold a NaN or an infinity takes the strict plan (kernels.h ox_graph.strict); finite
inputs keep oneDNN's relu and fused Clip (test_finite_inputs_keep_the_fused_relu), and a run
that made a NaN or an infinity from them runs again strict (kernels.c run_plan)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import graph_model, onednn_log, onnxruntime_run, run_both
from onnx import helper

from nnplug_conformance.nonfinite import assert_nonfinite_match, cases, max_pool, special_array

CASES = cases()
# the cases whose op this backend does not run (the cpu backend does): ops outside its table;
# Max and Min, whose oneDNN forms drop a NaN; a Clip whose min is above its max. A case that
# changes side fails below.
DECLINED = {
    "ArgMax", "ArgMax-last", "ArgMin", "ArgMin-last", "Asinh", "Atan", "Ceil", "Celu", "Clip-min-above-max", "Cos",
    "Floor", "Hardmax", "LpNormalization", "LpPool", "Max", "Max-3",
    "Max-broadcast", "Mean-2", "MeanVarianceNormalization", "Min", "Min-broadcast", "Mish", "PRelu",
    "Pow-0.5", "Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSumExp", "ReduceMax",
    "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare", "Round",
    "Selu", "Shrink", "Sign", "Sin", "Sinh", "Softsign", "Sum-3", "ThresholdedRelu",
}


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", sorted(CASES))
def test_nonfinite_inputs_match_onnxruntime(rt, case, threads):
    model, feeds, formula = CASES[case]
    assignment, outs, want = run_both(rt, model, feeds, threads)
    placed = {v.split()[0] for v in assignment.values()}  # "cpu (folded)": a folded constant
    assert "cpu" in placed if case in DECLINED else placed == {"onednn"}, assignment
    assert_nonfinite_match(outs[0], formula(feeds, onnxruntime_run) if formula else want[0], case)


def test_nan_from_another_backend_goes_through_relu(rt):
    """A NaN made by a node the cpu backend runs (Max) reaches a partition of this backend as
    its input: the strict plan keeps it through Conv+Relu and MaxPool."""
    rng = np.random.default_rng(4)
    x = special_array((1, 16, 8, 8), rng, (np.nan,))
    k = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
    w = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
    nodes = [helper.make_node("Max", ["x", "k"], ["m"], name="max"),
             helper.make_node("Conv", ["m", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["y"], name="pool", kernel_shape=[2, 2], strides=[2, 2])]
    model = graph_model(nodes, {"x": x}, {"k": k, "w": w})
    assignment, outs, _ = run_both(rt, model, {"x": x}, 1)
    assert assignment == {"max": "cpu", "conv": "onednn", "relu": "onednn", "pool": "onednn"}, assignment
    want = max_pool(onnxruntime_run(graph_model(nodes[:3], {"x": x}, {"k": k, "w": w}), {"x": x})[0], 2, 2, 0)
    assert np.isnan(want).any()
    assert_nonfinite_match(outs[0], want, "max -> conv+relu -> maxpool")


@pytest.mark.parametrize("where", ["first", "last"])
def test_nan_made_by_either_thread_is_kept(rt, where):
    """At 2 threads each thread runs part of a large Sub: a NaN made (inf - inf) only in the first
    or only in the last rows is seen whichever thread made it, and kept through the Relu."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 32, 64, 64)).astype(np.float32)
    rows = slice(0, 2) if where == "first" else slice(-2, None)
    big = np.float32(1e20)  # squared: inf, and inf - inf = NaN
    x[rows, :, ::7, ::5] = big
    nodes = [helper.make_node("Mul", ["x", "x"], ["xx"], name="square"),
             helper.make_node("Sub", ["xx", "xx"], ["d"], name="diff"),
             helper.make_node("Relu", ["d"], ["y"], name="relu")]
    model = graph_model(nodes, {"x": x})
    assignment, outs, want = run_both(rt, model, {"x": x}, 2)
    assert set(assignment.values()) == {"onednn"}, assignment
    assert np.isnan(want[0]).sum() == np.count_nonzero(x == big)
    assert_nonfinite_match(outs[0], want[0], f"NaN made in the {where} rows")


SETUP = """
import numpy as np
from conftest import graph_model
from onnx import helper
rng = np.random.default_rng(6)
x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
if sys.argv[2] == "nan":
    x[0, 0, 0, 0] = np.nan
w = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
model = graph_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["y"])], {"x": x}, {"w": w})
feeds = {"x": x}
"""


def test_finite_inputs_keep_the_fused_relu():
    """Only a run with a NaN or an infinity in an input pays for the strict plan: with finite
    inputs the Relu is oneDNN's relu post-op of the convolution, with a NaN an elu and a linear."""
    finite = [ln for ln in onednn_log(SETUP, "finite") if ",convolution," in ln]
    strict = [ln for ln in onednn_log(SETUP, "nan") if ",convolution," in ln]
    assert len(finite) == 1 and "eltwise_relu" in finite[0] and "eltwise_elu" not in finite[0], finite
    assert len(strict) == 1 and "eltwise_elu+eltwise_linear" in strict[0], strict


MADE_INSIDE = """
import numpy as np
from conftest import graph_model
from onnx import helper
rng = np.random.default_rng(9)
x = rng.standard_normal((1, 16, 8, 8)).astype(np.float32)
if sys.argv[2] == "overflow":
    x[0, 3, 4, 4] = 1e20  # squared: inf; inf - inf: NaN
w = (rng.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
model = graph_model([helper.make_node("Mul", ["x", "x"], ["xx"]), helper.make_node("Sub", ["xx", "xx"], ["d"]),
                     helper.make_node("Conv", ["d", "w"], ["c"], pads=[1, 1, 1, 1]),
                     helper.make_node("Relu", ["c"], ["y"])], {"x": x}, {"w": w})
feeds = {"x": x}
"""


def test_a_run_that_makes_a_nan_runs_again_strict():
    """Finite inputs run the fast plan once; when that run made a NaN (here inf - inf before a
    Conv+Relu), the same run goes on to the strict plan, whose convolution keeps it (elu)."""
    normal = [ln for ln in onednn_log(MADE_INSIDE, "normal") if ",convolution," in ln]
    made = [ln for ln in onednn_log(MADE_INSIDE, "overflow") if ",convolution," in ln]
    assert len(normal) == 1 and "eltwise_relu" in normal[0], normal
    assert len(made) == 2 and "eltwise_relu" in made[0] and "eltwise_elu+eltwise_linear" in made[1], made


SPREAD_SOFTMAX = """
import numpy as np
from conftest import graph_model
from onnx import helper
rng = np.random.default_rng(10)
x = rng.standard_normal((1, 16, 4, 4)).astype(np.float32)
x[0, 2, 1, 1] = float(sys.argv[2])  # logits up to about this far apart
w = (rng.standard_normal((1000, 16, 4, 4)) / 8).astype(np.float32)
model = graph_model([helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
                     helper.make_node("Flatten", ["r"], ["f"]),
                     helper.make_node("Softmax", ["f"], ["y"], axis=1)], {"x": x}, {"w": w})
feeds = {"x": x}
"""


@pytest.mark.parametrize("spread", ["1", "1e12"])
def test_a_softmax_of_far_apart_logits_does_not_run_again_strict(rt, spread):
    """A classifier's last Softmax (1000 logits: a tail of 8 lanes) whose logits lie far apart:
    each e^(x - max) far below the float range is 0, computed without overflowing on the way
    (which raised the floating-point flags and ran the whole network a second time, strict,
    on every run of such a model). Same answer as onnxruntime's."""
    lines = onednn_log(SPREAD_SOFTMAX, spread)
    assert len([ln for ln in lines if ",convolution," in ln]) == 1, lines
    scope: dict = {"sys": type("S", (), {"argv": ["", "", spread]})}
    exec(SPREAD_SOFTMAX, scope)
    for threads in (1, 2):
        placed, got, want = run_both(rt, scope["model"], scope["feeds"], threads)
        assert set(placed.values()) == {"onednn"}, placed
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-7)
