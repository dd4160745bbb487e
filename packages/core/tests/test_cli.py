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
    assert "no backend is installed" in r.stderr and "pip install nnplug-backend-<id>" in r.stderr


COMMAND_MODULE = '''
import sys

def main(argv):
    print("hello from a package:", argv)
    return 3

def info(argv):
    print("not the built-in")
    return 0
'''


def test_packages_add_commands_through_the_nnplug_cli_entry_point_group(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    install_dist(site, "nnplug-hello", {"nnplug.cli": ["hello = plug_hello:main",
                                                       "info = plug_hello:info",
                                                       "broken = plug_missing:main"]},
                 {"plug_hello": COMMAND_MODULE})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    env.pop("NNPLUG_DISABLE_PLUGINS", None)

    r = nnplug_cmd(["hello", "a", "--flag"], env)
    assert r.returncode == 3 and "hello from a package: ['a', '--flag']" in r.stdout, r.stderr
    helptext = nnplug_cmd(["--help"], env).stdout
    assert "hello" in helptext and "from nnplug-hello" in helptext
    r = nnplug_cmd(["info"], env)  # a built-in command is never replaced
    assert r.returncode == 0 and "not the built-in" not in r.stdout
    r = nnplug_cmd(["broken"], env)
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    assert "command 'broken'" in r.stderr and "nnplug-hello" in r.stderr, r.stderr
    env["NNPLUG_DISABLE_PLUGINS"] = "hello"
    assert nnplug_cmd(["hello"], env).returncode == 2  # unknown command: usage error


@pytest.mark.parametrize("repeat", ["0", "-3"])
def test_run_refuses_a_repeat_below_one(env, tmp_path, repeat):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    r = nnplug_cmd(["run", str(path), "--backend", "goodplug", "--repeat", repeat], env)
    assert r.returncode != 0
    assert "--repeat must be at least 1" in r.stderr and "Traceback" not in r.stderr


def test_run_saves_outputs_as_npy_files(env, tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(mlp(), path)
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "out"
    r = nnplug_cmd(["run", str(path), "--backend", "goodplug", "--input", f"x={tmp_path / 'x.npy'}",
                    "--output-dir", str(out)], env)
    assert r.returncode == 0, r.stderr
    saved = np.load(out / "y.npy")
    assert saved.shape == (2, 3) and saved.dtype == np.float32
    assert f"saved: {out / 'y.npy'}" in r.stdout


def test_relative_folders_on_the_command_line_are_taken_from_the_current_folder(env, tmp_path):
    # the library refuses relative paths; the CLI resolves them against where the user is
    (tmp_path / "backends").mkdir()
    r = subprocess.run([sys.executable, "-m", "nnplug", "doctor", "--path", "backends",
                        "--no-entry-points"], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert "relative path ignored" not in r.stdout + r.stderr
    assert str(tmp_path / "backends") in r.stdout
    r = subprocess.run([sys.executable, "-m", "nnplug", "info", "--backend-path", "backends"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "relative path ignored" not in r.stdout
