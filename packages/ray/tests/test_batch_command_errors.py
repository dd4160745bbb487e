"""`nnplug batch` refuses bad arguments with one line before it starts or joins a cluster."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ray_models import mlp


def nnplug_batch(*args):
    return subprocess.run([sys.executable, "-m", "nnplug", "batch", *args], capture_output=True,
                          text=True, timeout=120)


def test_the_command_is_listed_by_nnplug_help():
    r = subprocess.run([sys.executable, "-m", "nnplug", "--help"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0 and "batch" in r.stdout and "from nnplug-ray" in r.stdout


@pytest.mark.parametrize("make_args, message", [
    (lambda tmp: [str(tmp / "nope.onnx"), str(tmp), str(tmp / "o.parquet")],
     "model file '{tmp}/nope.onnx' does not exist"),
    (lambda tmp: [str(tmp / "m.onnx"), str(tmp), str(tmp / "o.parquet"), "--input", "x"],
     "--input 'x': write it as COLUMN=INPUT"),
    (lambda tmp: [str(tmp / "junk.onnx"), str(tmp), str(tmp / "o.parquet")],
     "the model is not a readable ONNX file"),
])
def test_bad_arguments_are_one_line_errors(tmp_path, make_args, message):
    (tmp_path / "m.onnx").write_bytes(mlp())
    (tmp_path / "junk.onnx").write_bytes(b"not a model")
    r = nnplug_batch(*make_args(tmp_path))
    assert r.returncode == 1, r.stderr
    assert r.stderr.startswith("nnplug: error: ") and r.stderr.count("\n") == 1, r.stderr
    assert message.format(tmp=tmp_path) in r.stderr
