"""During a run the pool's threads are kept off each other's CPUs, and every thread has its own
affinity back when the run ends (plan_run.c, dl_apart in dl.c). A virtual machine's kernel
can wake a sleeping pool thread onto its waker's CPU and leave both there for tens of
milliseconds; the runs after a pause then took three times as long. Checked in a child
process (affinities are process state): a sampling thread reads every thread's affinity while
the runs go on, with pauses between them; a process bound to one CPU runs as before."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CHILD = r"""
import json, os, sys, threading, time

bind = json.loads(sys.argv[1])
if bind:  # before any import starts a thread: every thread inherits it
    os.sched_setaffinity(0, bind)
import numpy as np, onnx, nnplug, onnxruntime as ort
from onnx import helper, numpy_helper, TensorProto
rng = np.random.default_rng(0)
nodes, inits, x = [], [], "x"
for i in range(6):  # a few ms a run at 2 threads: long enough to be kept apart
    w = numpy_helper.from_array(rng.standard_normal((64, 64, 3, 3)).astype(np.float32) * 0.05,
                                f"w{i}")
    inits.append(w)
    nodes += [helper.make_node("Conv", [x, w.name], [f"c{i}"], pads=[1, 1, 1, 1]),
              helper.make_node("Relu", [f"c{i}"], [f"r{i}"])]
    x = f"r{i}"
graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 64, 56, 56])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, None)], inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
feed = {"x": rng.standard_normal((1, 64, 56, 56)).astype(np.float32)}

process = os.sched_getaffinity(0)
before = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
so = nnplug.SessionOptions()
so.intra_op_num_threads = 2
sess = nnplug.InferenceSession(model.SerializeToString(), so, providers=["onednn"])
placed = set(sess._net.assignment.values())

narrowed, done = [], threading.Event()
def sample():
    while not done.is_set():
        for t in os.listdir("/proc/self/task"):
            try:
                mask = os.sched_getaffinity(int(t))
            except OSError:  # a thread that ended
                continue
            if mask < process:
                narrowed.append(sorted(mask))
        time.sleep(0.0002)

sampler = threading.Thread(target=sample)
sampler.start()
outs = []
for i in range(12):
    time.sleep(0.05)  # the pool's threads go to sleep between runs
    outs.append(sess.run(None, feed)[0])
done.set()
sampler.join()
after = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
want = ort.InferenceSession(model.SerializeToString(),
                            providers=["CPUExecutionProvider"]).run(None, feed)[0]
print(json.dumps({
    "placed": sorted(placed),
    "cpus": sorted(process),
    "narrowed": narrowed[:5],
    "threads": len(after),
    "all_given_back": all(m == process for m in after.values()),
    "callers_kept": before[os.getpid()] == after[os.getpid()],
    "max_diff": max(float(np.abs(o - want).max()) for o in outs),
    "scale": float(np.abs(want).max()),
}))
"""


def child(bind: list[int]) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(bind)], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_threads_run_apart_and_get_their_affinity_back():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the pool's threads have nowhere apart to go")
    got = child([])
    assert got["placed"] == ["onednn"], got
    assert got["threads"] >= 2, got  # the OpenMP pool's thread beside the caller
    # seen during the runs: a thread allowed fewer CPUs than the process (the others' left out)
    assert got["narrowed"], got
    assert all(len(m) < len(got["cpus"]) for m in got["narrowed"]), got
    # and after them every thread, the caller's too, has the process's affinity again
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got


def test_a_process_bound_to_one_cpu_runs_as_before():
    cpu = min(os.sched_getaffinity(0))
    got = child([cpu])
    assert got["cpus"] == [cpu], got
    assert got["placed"] == ["onednn"], got
    assert not got["narrowed"], got  # no other CPU to keep a thread on: nothing changed
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got
