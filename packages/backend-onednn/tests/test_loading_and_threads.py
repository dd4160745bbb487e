"""Loading (a missing oneDNN is a load error that says how to fix it; GNU OpenMP waits
passively), and one network run from many threads."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
from conftest import BACKENDS, graph_model
from onnx import helper

from nnplug_conformance.fixtures import run_from_threads

CHILD = r"""
import ctypes, json, nnplug
rt = nnplug.Runtime()
libc = ctypes.CDLL(None)
libc.getenv.restype = ctypes.c_char_p
env = {k: (libc.getenv(k.encode()) or b"").decode() for k in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
print(json.dumps({"backends": sorted(rt.backends), "errors": [str(e) for e in rt.load_errors],
                  "env": env}))
"""


def child(**env):
    full = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD], env=full, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    import json

    return json.loads(out.stdout.strip().splitlines()[-1])


def test_missing_libdnnl_is_a_load_error_naming_it_and_the_fix():
    got = child(NNPLUG_ONEDNN_LIBRARY="/nonexistent/libdnnl.so.3")
    assert "onednn" not in got["backends"]
    assert "cpu" in got["backends"]  # the other backends still load
    text = " ".join(got["errors"])
    assert "/nonexistent/libdnnl.so.3" in text, text
    assert "pip install onednn-cpu-gomp==2023.2.0" in text, text


def test_entry_point_finds_the_wheels_libdnnl_and_openmp_waits_passively():
    got = child()
    assert "onednn" in got["backends"], got["errors"]
    assert got["env"]["OMP_WAIT_POLICY"] == "passive"
    # a spin of about 20 us, counted in libgomp's wait-loop iterations as measured at start-up
    assert 200 <= int(got["env"]["GOMP_SPINCOUNT"]) <= 100000, got["env"]


def test_users_openmp_settings_are_kept():
    got = child(OMP_WAIT_POLICY="active", GOMP_SPINCOUNT="123")
    assert "onednn" in got["backends"], got["errors"]
    assert got["env"] == {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "123"}


def test_many_threads_run_one_network_with_identical_results(rt):
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="gemm")]
    inits = {"w": rng.standard_normal((16, 3, 3, 3)).astype(np.float32),
             "b": rng.standard_normal(16).astype(np.float32),
             "w2": rng.standard_normal((10, 16)).astype(np.float32)}
    xs = [rng.standard_normal((2, 3, 16, 16)).astype(np.float32) for _ in range(4)]
    model = graph_model(nodes, {"x": xs[0]}, inits)
    with rt.load(model, backends=BACKENDS) as net:
        assert net.assignment["conv"] == "onednn"
        want = [net.run({"x": x})["y"] for x in xs]
        results = run_from_threads(lambda x: net.run({"x": x})["y"], xs, threads=6, rounds=5)
    assert len(results) == 30
    for k, y in results:
        np.testing.assert_array_equal(y, want[k])
