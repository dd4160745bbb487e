"""RNN, GRU and LSTM at the sizes of real recurrent models match onnxruntime: the step product
(R transposed once, at load for a constant R or per run for a fed one, streamed for up to four
batch rows; for more, R^T packed once for the packed product MatMul runs), the input projection shared between threads, and the gates'
activations computed a row at a time.

The step product sums each output in the same order with fused multiply-adds at every ISA
level, so with a zero input projection (W = 0: only the recurrence computes) the outputs are
bit-identical between the AVX-512 and the portable kernels, and between 1 and 2 threads.
NNPLUG_CPU_ISA caps the kernels for a process, so each of those runs in its own."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import onnxruntime_run
from onnx import TensorProto, helper, numpy_helper

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent(op, T, B, F, H, *, direction="forward", fed_r=False, lbr=0, zero_w=False,
              lens=None, seed=0):
    """(model, feeds) of one recurrent node with all of its outputs, random weights."""
    rng = np.random.default_rng(seed)
    D = 2 if direction == "bidirectional" else 1
    G = GATES[op]
    w = np.zeros((D, G * H, F), np.float32) if zero_w else \
        rng.uniform(-0.3, 0.3, (D, G * H, F)).astype(np.float32)
    # R's spectral radius about 0.9, as in trained models: the recurrence neither blows up nor
    # amplifies rounding differences step after step
    r = rng.uniform(-1.5, 1.5, (D, G * H, H)).astype(np.float32) / np.float32(np.sqrt(H))
    b = rng.uniform(-0.5, 0.5, (D, 2 * G * H)).astype(np.float32)
    feeds = {"x": rng.standard_normal((T, B, F)).astype(np.float32),
             "h0": rng.standard_normal((D, B, H)).astype(np.float32)}
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [T, B, F])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]
    if fed_r:  # R as a graph input: packed per run, not at load
        feeds["r"] = r
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, list(r.shape)))
    else:
        inits.append(numpy_helper.from_array(r, "r"))
    names = ["x", "w", "r", "b", "", "h0"]
    if lens is not None:
        inits.append(numpy_helper.from_array(np.array(lens, np.int32), "lens"))
        names[4] = "lens"
    inputs.append(helper.make_tensor_value_info("h0", TensorProto.FLOAT, [D, B, H]))
    outs = ["y", "yh"]
    attrs = {"hidden_size": H, "direction": direction}
    if op == "LSTM":
        feeds["c0"] = rng.standard_normal((D, B, H)).astype(np.float32)
        inputs.append(helper.make_tensor_value_info("c0", TensorProto.FLOAT, [D, B, H]))
        names.append("c0")
        outs.append("yc")
    if op == "GRU":
        attrs["linear_before_reset"] = lbr
    node = helper.make_node(op, names, outs, **attrs)
    shapes = {"y": [T, D, B, H], "yh": [D, B, H], "yc": [D, B, H]}
    graph = helper.make_graph([node], op.lower(), inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o])
                               for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]), feeds


CASES = [  # (op, T, B, F, H, options): gate rows off the 64-column blocks, 1-4 rows and 5
    ("LSTM", 30, 1, 80, 256, {}),
    ("GRU", 30, 1, 80, 256, {}),
    ("GRU", 30, 1, 80, 256, {"lbr": 1}),
    ("RNN", 30, 1, 80, 256, {}),
    ("LSTM", 12, 2, 16, 40, {"fed_r": True}),
    ("GRU", 12, 3, 16, 40, {"fed_r": True}),
    ("GRU", 12, 4, 16, 40, {"direction": "bidirectional", "lbr": 1}),
    ("LSTM", 12, 3, 16, 40, {"direction": "bidirectional", "lens": [12, 5, 1]}),
    # more rows than the step product takes: R^T packed once for MatMul's packed product,
    # shared across runs when constant, per run when fed; the rows' gates on the threads
    ("LSTM", 12, 5, 16, 40, {}),
    ("LSTM", 12, 8, 16, 40, {"fed_r": True, "lens": [12, 5, 1, 12, 0, 7, 12, 3]}),
    ("GRU", 12, 6, 16, 40, {}),
    ("GRU", 12, 6, 16, 40, {"fed_r": True, "direction": "reverse"}),
    ("GRU", 12, 7, 16, 40, {"direction": "bidirectional", "lbr": 1}),
    ("RNN", 12, 9, 16, 40, {}),
    # rows enough for their gates to be split between threads (at least ~2,000 gate values
    # per chunk)
    ("LSTM", 6, 12, 16, 128, {"lens": [6, 1, 0, 6, 3, 6, 2, 6, 5, 6, 4, 6]}),
    ("GRU", 6, 10, 16, 128, {}),
    ("GRU", 12, 4, 16, 24, {"direction": "reverse", "fed_r": True, "lens": [3, 12, 0, 7]}),
]


def _id(case):
    op, T, B, F, H, opts = case
    return f"{op}-T{T}-B{B}-H{H}" + "".join(f"-{k}{v}" for k, v in opts.items())


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_recurrent_nodes_match_onnxruntime(rt, threads, case):
    op, T, B, F, H, opts = case
    model, feeds = recurrent(op, T, B, F, H, **opts)
    want = onnxruntime_run(model, feeds)
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run(feeds)
    for name, w in zip(["y", "yh", "yc"], want):
        # sums of 256 products in another order, then sigmoid/tanh within 2 ulp of libm's
        np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-6, err_msg=f"{op} {name}")


RUN = r"""
import sys, glob, os, numpy as np, onnx, nnplug, nnplug_backend_cpu
folder, threads = sys.argv[1], int(sys.argv[2])
rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
rt.register_backend(nnplug_backend_cpu.library_path())
rt.backends["cpu"].backend.set_num_threads(threads)
for path in sorted(glob.glob(os.path.join(folder, "*.onnx"))):
    feeds = dict(np.load(path[:-5] + ".in.npz"))
    with rt.load(onnx.load(path), backends=["cpu"]) as net:
        out = net.run(feeds)
    np.savez(path[:-5] + f".{os.environ.get('NNPLUG_CPU_ISA', 'best')}.{threads}.npz", **out)
"""

HAS_AVX512 = os.path.exists("/proc/cpuinfo") and " avx512f" in open("/proc/cpuinfo").read()


def _run_in_subprocesses(folder, runs):
    for isa, threads in runs:
        env = dict(os.environ)
        env.pop("NNPLUG_CPU_ISA", None)
        if isa != "best":
            env["NNPLUG_CPU_ISA"] = isa
        subprocess.run([sys.executable, "-c", RUN, str(folder), str(threads)], env=env,
                       check=True, timeout=600)


def test_one_and_two_threads_give_the_same_bits(tmp_path):
    """The input projection and the step product are split between threads;
    neither changes how an element is summed."""
    import onnx

    for i, (op, T, B, F, H, opts) in enumerate(CASES):
        model, feeds = recurrent(op, T, B, F, H, seed=i, **opts)
        onnx.save(model, tmp_path / f"{i:02d}_{op}.onnx")
        np.savez(tmp_path / f"{i:02d}_{op}.in.npz", **feeds)
    _run_in_subprocesses(tmp_path, [("best", 2), ("best", 1)])
    for path in sorted(tmp_path.glob("*.onnx")):
        two, one = (np.load(str(path)[:-5] + f".best.{t}.npz") for t in (2, 1))
        for name in two.files:
            assert np.array_equal(two[name], one[name]), f"{path.name} {name}: 1 thread differs"


@pytest.mark.skipif(not HAS_AVX512, reason="the AVX-512 step product needs avx512f")
def test_the_step_product_gives_the_same_bits_on_every_kernel_and_thread_count(tmp_path):
    import onnx

    for i, (op, T, B, F, H, opts) in enumerate(CASES):
        if B > 4:  # the packed product's portable kernel multiplies, then adds: other bits
            continue
        model, feeds = recurrent(op, T, B, F, H, zero_w=True, seed=i, **opts)
        onnx.save(model, tmp_path / f"{i:02d}_{op}.onnx")
        np.savez(tmp_path / f"{i:02d}_{op}.in.npz", **feeds)
    runs = [("best", 2), ("best", 1), ("portable", 1)]
    _run_in_subprocesses(tmp_path, runs)
    for path in sorted(tmp_path.glob("*.onnx")):
        outs = [np.load(str(path)[:-5] + f".{isa}.{threads}.npz") for isa, threads in runs]
        for name in outs[0].files:
            for other, (isa, threads) in zip(outs[1:], runs[1:]):
                assert np.array_equal(outs[0][name], other[name]), \
                    f"{path.name} {name}: {isa} at {threads} thread(s) differs from avx512 at 2"


def test_threads_sharing_a_batched_network_get_their_own_answers(rt):
    """The first runs of a batch of more rows than the step product takes pack the constant R
    for all later runs: threads that make those first runs at once get right answers."""
    import threading

    model, feeds = recurrent("GRU", 12, 6, 16, 40, seed=3)
    want = onnxruntime_run(model, feeds)
    barrier = threading.Barrier(6)
    errors = []
    with rt.load(model, backends=["cpu"]) as net:
        def work():
            try:
                barrier.wait()
                for _ in range(3):
                    got = net.run(feeds)
                    for name, w in zip(["y", "yh"], want):
                        np.testing.assert_allclose(got[name], w, rtol=2e-5, atol=2e-6)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors


@pytest.mark.parametrize("op", sorted(GATES))
@pytest.mark.parametrize("batch", [2, 6])
def test_a_hidden_size_of_zero_gives_empty_outputs(rt, op, batch):
    """R [1, 0, 0]: nothing to compute, a batch below and above the step product's rows
    (onnxruntime refuses the node at load; nnplug runs it to empty outputs)."""
    w = numpy_helper.from_array(np.zeros((1, 0, 8), np.float32), "w")
    r = numpy_helper.from_array(np.zeros((1, 0, 0), np.float32), "r")
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w", "r"], ["y", "yh"], hidden_size=0)], "empty",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, batch, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 1, batch, 0]),
         helper.make_tensor_value_info("yh", TensorProto.FLOAT, [1, batch, 0])], [w, r])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    with rt.load(model, backends=["cpu"]) as net:
        got = net.run({"x": np.ones((5, batch, 8), np.float32)})
    assert got["y"].shape == (5, 1, batch, 0) and got["yh"].shape == (1, batch, 0)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("B,H", [(1, 40), (3, 70), (6, 128)])
def test_the_one_pass_lstm_cell_gives_the_passes_bits(rt, B, H, bias):
    """An LSTM with the default activations and no clip, peepholes or coupled gates computes
    each row's gates in one pass a chunk at a time (nnc_lstm_cell); any of those options
    takes the gate-by-gate passes. A clip no value reaches changes no value, so the two paths
    must give the same bits (H across the 64-value chunks, rows on and off the threads)."""
    model, feeds = recurrent("LSTM", 9, B, 16, H, seed=B)
    node = model.graph.node[0]
    if not bias:
        node.input[3] = ""
    outs = []
    for clip in (None, 1e30):
        if clip is not None:
            node.attribute.append(helper.make_attribute("clip", clip))
        with rt.load(model, backends=["cpu"]) as net:
            outs.append(net.run(feeds))
    for name in ("y", "yh", "yc"):
        assert np.array_equal(outs[0][name].view(np.uint32), outs[1][name].view(np.uint32)), name
    want = onnxruntime_run(model, feeds)
    np.testing.assert_allclose(outs[0]["yc"], want[2], rtol=2e-5, atol=2e-6)
