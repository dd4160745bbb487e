"""Fixtures: a Runtime with this package's backend first and nnplug-backend-cpu after it, and
model helpers. oneDNN is x86-64 only: elsewhere nothing here is collected."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import nnplug

if platform.machine().lower() not in ("x86_64", "amd64"):
    collect_ignore_glob = ["test_*.py"]

ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
BACKENDS = ["onednn", "cpu"]
with open("/proc/cpuinfo") as _f:
    AMX = "amx_bf16" in _f.read().split()  # where oneDNN runs bf16 products on AMX kernels


def make_runtime() -> nnplug.Runtime:
    import nnplug_backend_cpu
    import nnplug_backend_onednn

    r = nnplug.Runtime(nnplug.CreationOptions.isolated())
    r.register_backend(nnplug_backend_onednn.library_path())
    r.register_backend(nnplug_backend_cpu.library_path())
    return r


@pytest.fixture(scope="session")
def rt():
    r = make_runtime()
    yield r
    r.close()


def graph_model(nodes, inputs: dict, inits: dict | None = None, opset: int = 18):
    """A model of ``nodes``; ``inputs``: graph input name -> array (the feeds); ``inits``:
    initializer name -> array. The graph outputs are the last node's outputs, typed by ONNX
    shape inference."""
    inits = inits or {}
    gin = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for k, v in inputs.items()]
    ini = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    outs = list(nodes[-1].output)
    probe = helper.make_model(helper.make_graph(nodes, "g", gin, [], ini),
                              opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    model = helper.make_model(helper.make_graph(nodes, "g", gin, [inferred[o] for o in outs], ini),
                              opset_imports=[helper.make_opsetid("", opset)])
    return model


def onnxruntime_run(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_both(rt, model, feeds, threads, targets=None):
    """The model on onednn+cpu at ``threads`` oneDNN threads (the backends' ``targets`` when
    given): (assignment, outputs, onnxruntime's)."""
    lib = rt.backends["onednn"].backend
    want = onnxruntime_run(model, feeds)
    try:
        lib.set_num_threads(threads)
        with rt.load(model, backends=BACKENDS, targets=targets) as net:
            assignment = dict(net.assignment)
            got = net.run(feeds)
            outs = [got[o.name] for o in net.outputs]
    finally:
        lib.set_num_threads(0)
    return assignment, outs, want


def assert_matches(got, want, rtol=1e-4, what=""):
    """Equal within rtol of the expected output's range (absolute error)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1e-6)
    err = float(np.abs(got.astype(np.float64) - want).max()) if want.size else 0.0
    assert err <= rtol * scale, f"{what}: max error {err:.3g} > {rtol} x {scale:.3g}"


def zoo_model(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(ZOO, f"light_{name}.onnx"))


def zoo_input(model: onnx.ModelProto, seed=0):
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return inp.name, np.random.default_rng(seed).random(shape, dtype=np.float32)



def assert_all_on_onednn_and_matching(rt, nodes, feeds, inits, opset, threads, what):
    """The graph of ``nodes`` runs wholly on onednn at ``threads`` oneDNN threads and every
    output matches onnxruntime's (see assert_matches)."""
    model = graph_model(nodes, feeds, inits, opset=opset)
    assignment, outs, want = run_both(rt, model, feeds, threads)
    assert set(assignment.values()) == {"onednn"}, assignment
    for g, w in zip(outs, want):
        assert_matches(g, w, what=f"{what}, {threads} thread(s)")

_LOGGED_RUN = """
import sys
sys.path.insert(0, sys.argv[1])
{setup}
from conftest import make_runtime
with make_runtime().load(model, backends=["onednn", "cpu"]) as net:
    net.run(feeds)  # the first run builds the plan (weights reordered once)
    sys.stdout.flush()
    print("=== run", flush=True)
    net.run(feeds)
    sys.stdout.flush()
    print("=== end", flush=True)
"""


def profiled_steps(setup: str) -> list[str]:
    """The step lines the backend's profile (``NNPLUG_ONEDNN_PROFILE=1``) prints for one run of
    the ``model`` on ``feeds`` that the code ``setup`` makes, in a process of its own (this
    folder on its path), the model wholly on onednn."""
    child = ("import sys\nsys.path.insert(0, sys.argv[1])\n"
             "from conftest import BACKENDS, make_runtime\n" + setup +
             "\nwith make_runtime().load(model, backends=BACKENDS) as net:\n"
             "    assert set(net.assignment.values()) == {'onednn'}, net.assignment\n"
             "    net.run(feeds)\n")
    env = dict(os.environ, NNPLUG_ONEDNN_PROFILE="1")
    out = subprocess.run([sys.executable, "-c", child, os.path.dirname(__file__)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line for line in out.stderr.splitlines() if line.startswith("nnplug-onednn: step")]


def onednn_log(setup: str, *args: str, env: dict | None = None) -> list[str]:
    """The lines oneDNN logs (``ONEDNN_VERBOSE=1``, one thread) for the primitives of one run of
    the ``model`` that the code ``setup`` makes, on ``feeds`` it makes too: run in a process of
    its own (this folder on its path, ``args`` in ``sys.argv[2:]``, ``env`` added to its
    environment), after a first run. Each line, split at commas, is
    ``onednn_verbose, exec, cpu, <kind>, <implementation>, ...``."""
    env = dict(os.environ, ONEDNN_VERBOSE="1", NNPLUG_CPU_THREADS="1", **(env or {}))
    child = _LOGGED_RUN.format(setup=setup)
    out = subprocess.run([sys.executable, "-c", child, os.path.dirname(__file__), *args], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    run = out.stdout.split("=== run")[1].split("=== end")[0]
    return [ln for ln in run.splitlines() if ln.startswith("onednn_verbose") and ",exec," in ln]
