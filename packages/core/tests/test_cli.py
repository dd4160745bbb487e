"""The nnplug command, run as a real subprocess against a real installed plugin."""

import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from models import mlp
from test_discovery import BACKEND_MODULE, BROKEN_MODULE, install_dist

HERE = os.path.dirname(__file__)


def make_env(tmp_path, backends):
    site = tmp_path / "site"
    site.mkdir()
    install_dist(site, "nnplug-cli-plugins", {"nnplug.backends": backends},
                 {"plug_backends": BACKEND_MODULE, "plug_broken": BROKEN_MODULE})
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(site), HERE, e.get("PYTHONPATH", "")])
    e.pop("NNPLUG_DISABLE_PLUGINS", None)
    return e


@pytest.fixture
def env(tmp_path):
    return make_env(tmp_path, ["goodplug = plug_backends:Good"])


def nnplug_cmd(args, env):
    return subprocess.run([sys.executable, "-m", "nnplug", *args], env=env, capture_output=True,
                          text=True, timeout=120)


def test_info_lists_backends_with_their_source_and_load_errors(tmp_path):
    env = make_env(tmp_path, ["goodplug = plug_backends:Good", "brokenplug = plug_broken:X"])
    r = nnplug_cmd(["info"], env)
    assert r.returncode == 0, r.stderr
    assert "goodplug" in r.stdout and "nnplug-cli-plugins 1.0" in r.stdout
    assert "load errors:" in r.stdout and "brokenplug" in r.stdout


def test_run_with_random_inputs_prints_outputs_and_placement(env, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    r = nnplug_cmd(["run", str(path), "--backend", "goodplug", "--placement"], env)
    assert r.returncode == 0, r.stderr
    assert "y: shape [1, 3] dtype float32" in r.stdout
    assert "nodes ran on: goodplug (3), goodplug (folded) (1)" in r.stdout
    assert "  matmul: goodplug\n" in r.stdout and "  bias: goodplug (folded)\n" in r.stdout


def test_run_with_inputs_from_npy_files(env, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    x = np.full((2, 4), -5, np.float32)  # all-negative input: relu gives exactly zero
    np.save(tmp_path / "x.npy", x)
    r = nnplug_cmd(["run", str(path), "--backend", "goodplug", "--input", f"x={tmp_path / 'x.npy'}"], env)
    assert r.returncode == 0, r.stderr
    assert "y: shape [2, 3]" in r.stdout


@pytest.mark.parametrize("args, message", [
    (["run", "/nonexistent/model.onnx"], "model file '/nonexistent/model.onnx' does not exist"),
    (["run", "MODEL", "--input", "x"], "write it as NAME=FILE.npy"),
    (["run", "MODEL", "--input", "x=/nonexistent.npy"], "does not exist"),
    (["run", "MODEL", "--backend", "nope"], "backend 'nope' is not available"),
])
def test_errors_exit_non_zero_with_one_line_and_no_traceback(env, tmp_path, args, message):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    args = [str(path) if a == "MODEL" else a for a in args]
    r = nnplug_cmd(args, env)
    assert r.returncode == 1
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_demo_without_backends_says_how_to_get_one(env):
    env["NNPLUG_DISABLE_PLUGINS"] = "*"
    r = nnplug_cmd(["demo"], env)
    assert r.returncode == 1
    assert "no backend is installed" in r.stderr and "pip install nnplug-backend-cpu" in r.stderr
