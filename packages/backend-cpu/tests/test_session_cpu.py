"""nnplug.InferenceSession on the cpu backend side by side with onnxruntime: outputs under
every optimisation level and thread count, thread counts that really change the pool, and
profiles that account for every node the backend ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from conftest import zoo_input, zoo_model
from onnx import TensorProto, helper, numpy_helper

import nnplug

ort = pytest.importorskip("onnxruntime")


@pytest.fixture(autouse=True)
def restore_cpu_threads(rt):
    """Sessions set the pool size process-wide: give the next tests what they started with."""
    yield
    rt.backends["cpu"].backend.set_num_threads(int(os.environ.get("NNPLUG_CPU_THREADS", "0")))


def convnet(batch=2, seed=0) -> onnx.ModelProto:
    """Conv -> BatchNorm -> Relu -> Conv (+ residual Add) -> Relu -> MaxPool -> Flatten -> Gemm
    -> Softmax, random weights: folding and fusion have work to do."""
    rng = np.random.default_rng(seed)

    def w(name, *shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    inits = [w("c1w", 8, 3, 3, 3), w("c1b", 8), w("c2w", 8, 8, 3, 3), w("c2b", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "g"),
             w("beta", 8), w("mean", 8),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, 8).astype(np.float32), "var"),
             w("fw", 10, 8 * 4 * 4), w("fb", 10)]
    nodes = [
        helper.make_node("Conv", ["x", "c1w", "c1b"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "g", "beta", "mean", "var"], ["bn"],
                         name="bn1"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "c2w", "c2b"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["res"], name="residual"),
        helper.make_node("Relu", ["res"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["y"], name="softmax", axis=1),
    ]
    g = helper.make_graph(nodes, "convnet",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def x_of(batch=2, seed=1):
    return np.random.default_rng(seed).standard_normal((batch, 3, 8, 8)).astype(np.float32)


def ort_run(model, feeds):
    return ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
def test_outputs_match_onnxruntime_at_every_level_and_thread_count(rt, level, threads):
    model = convnet()
    so = nnplug.SessionOptions()
    so.graph_optimization_level = getattr(nnplug.GraphOptimizationLevel, level)
    so.intra_op_num_threads = threads
    s = nnplug.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"], runtime=rt)
    assert s.get_providers() == ["cpu"]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for ours, theirs in ((s.get_inputs(), ref.get_inputs()), (s.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in ours] == [(a.name, a.shape, a.type) for a in theirs]
    x = x_of()
    np.testing.assert_allclose(s.run(None, {"x": x})[0], ref.run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-6)


def test_profile_accounts_for_every_node_once_per_run(rt, tmp_path):
    model = convnet()
    so = nnplug.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "p")
    s = nnplug.InferenceSession(model, so, runtime=rt)
    for seed in range(2):
        s.run(None, {"x": x_of(seed=seed)})
    with open(s.end_profiling()) as f:
        events = json.load(f)["traceEvents"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    ran = [n for e in kernels for n in e["args"]["nodes"]]
    folded = {n for n, b in s.network.assignment.items() if b.endswith("(folded)")}
    expected = [n.name for n in model.graph.node if n.name not in folded]
    assert sorted(ran) == sorted(expected * 2)  # each node once per run, fused ones named
    by_name = {e["args"]["nodes"][0]: e["args"] for e in kernels}
    assert by_name["conv1"]["fused"] and "relu1" in by_name["conv1"]["nodes"]
    assert by_name["conv1"]["op_type"].startswith("Conv+")
    assert by_name["conv1"]["input_shapes"][0] == [2, 3, 8, 8]
    assert by_name["conv1"]["output_shapes"] == [[2, 8, 8, 8]]
    assert all(e["args"]["backend"] == "cpu" for e in kernels)
    runs = [e for e in events if e["cat"] == "run"]
    assert len(runs) == 2
    for k in kernels:  # every kernel inside one of the runs, on the run's clock
        assert any(r["ts"] - 1 <= k["ts"] <= r["ts"] + r["dur"] + 1 for r in runs)


def test_disabled_optimisation_runs_every_node_unfused(rt):
    so = nnplug.SessionOptions()
    so.graph_optimization_level = nnplug.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.enable_profiling = True
    s = nnplug.InferenceSession(convnet(), so, runtime=rt)
    s.run(None, {"x": x_of()})
    kernels = [e for e in s._profiler.events() if e["cat"] == "kernel"]
    assert not any(e["args"]["fused"] for e in kernels)
    assert len(kernels) == len(convnet().graph.node)


THREADS_SCRIPT = """
import os, sys, numpy as np, nnplug
so = nnplug.SessionOptions(); so.intra_op_num_threads = int(sys.argv[1])
s = nnplug.InferenceSession(sys.argv[2], so, providers=["cpu"])
x = np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)
s.run(None, {s.get_inputs()[0].name: x})
api = nnplug.session.default_runtime().backends["cpu"].backend.device_api()
print(api.get_attr(nnplug.CPU, "multi_processor_count"), len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_intra_op_num_threads_changes_the_cpu_pool(tmp_path):
    path = tmp_path / "squeezenet.onnx"
    onnx.save(zoo_model("squeezenet"), str(path))
    env = {k: v for k, v in os.environ.items() if k != "NNPLUG_CPU_THREADS"}
    seen = {}
    for n in (1, 3):
        r = subprocess.run([sys.executable, "-c", THREADS_SCRIPT, str(n), str(path)],
                           capture_output=True, text=True, env=env, timeout=300)
        assert r.returncode == 0, r.stderr
        seen[n] = [int(v) for v in r.stdout.split()]
    assert seen[1][0] == 1 and seen[3][0] == 3
    assert seen[3][1] - seen[1][1] == 2  # two more workers in the process


@pytest.mark.slow
@pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
def test_zoo_model_through_the_session_matches_onnxruntime(rt, name):
    from nnplug_conformance.zoo import randomize_weights

    model = randomize_weights(zoo_model(name), seed=5)
    inp, x = zoo_input(model, seed=2)
    s = nnplug.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"],
                                runtime=rt)
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert [(a.name, a.shape, a.type) for a in s.get_inputs()] == \
           [(a.name, a.shape, a.type) for a in ref.get_inputs()]
    got, want = s.run(None, {inp: x}), ref.run(None, {inp: x})
    many = s.network.run_many([{inp: x}] * 2)
    for g, w in zip(got, want):
        scale = float(np.abs(w).max())
        assert float(np.abs(g - w).max()) <= 1e-4 * scale
    for r in many:
        np.testing.assert_array_equal(r[s.get_outputs()[0].name], got[0])


def nnplug_cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "nnplug.cli", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


def test_cli_profile_prints_a_table_and_writes_a_chart(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(convnet(), str(path))
    # the cpu backend's per-node events (another installed backend, e.g. onednn, could take it all)
    r = nnplug_cli("profile", str(path), "--backend", "cpu", "--runs", "3", "--trace", "t.json",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "op type" in r.stdout and "Conv+" in r.stdout and "load average" in r.stdout
    svg = (tmp_path / "convnet-profile.svg").read_text()
    assert svg.startswith("<svg") and "Softmax" in svg
    with open(tmp_path / "t.json") as f:
        assert len([e for e in json.load(f)["traceEvents"] if e["cat"] == "run"]) == 3
    pytest.importorskip("matplotlib")
    r = nnplug_cli("profile", str(path), "--backend", "cpu", "--runs", "1", "--chart", "c.png",
                   cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_cli_run_writes_a_chrome_trace(tmp_path):
    path = tmp_path / "convnet.onnx"
    onnx.save(convnet(), str(path))
    r = nnplug_cli("run", str(path), "--repeat", "2", "--profile", "trace.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    with open(tmp_path / "trace.json") as f:
        doc = json.load(f)
    cats = [e["cat"] for e in doc["traceEvents"]]
    assert cats.count("run") == 2 and "kernel" in cats
    r = nnplug_cli("profile", str(path), "--chart", "c.gif", cwd=tmp_path)
    assert r.returncode == 1 and "name it .svg or .png" in r.stderr
