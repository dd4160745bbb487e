"""`nnplug demo` on this backend: it recognises the shipped digits and matches onnxruntime,
under every setting that changes the backend's code path."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from nnplug import demo


@pytest.mark.parametrize("threads", ["1", "2"])
@pytest.mark.parametrize("coretype", [None, "Haswell"])
def test_demo_recognises_the_digits_and_matches_onnxruntime(coretype, threads):
    env = dict(os.environ, NNPLUG_CPU_THREADS=threads)
    env.pop("NNPLUG_DISABLE_PLUGINS", None)
    env.pop("OPENBLAS_CORETYPE", None)
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    r = subprocess.run([sys.executable, "-m", "nnplug", "demo", "--backend", "cpu"], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().endswith("-> OK"), r.stdout
    assert "recognised digits equal onnxruntime's" in r.stdout
    # one "true->recognised" pair per sample, in order, as the demo's data says
    pairs = re.findall(r"(\d)->(\d)(\*?)", r.stdout)
    labels, want = demo.true_labels(), demo.expected_output().argmax(axis=1)
    assert [int(t) for t, _, _ in pairs] == labels.tolist()
    assert [int(p) for _, p, _ in pairs] == want.tolist()
    assert all((mark == "*") == (t != p) for t, p, mark in pairs)
    right = int((labels == want).sum())
    assert f"accuracy: {right}/{len(labels)} " in r.stdout


def test_demo_result_matches_onnxruntime_in_process(rt):
    with rt.load(demo.MODEL, backends=["cpu"]) as net:
        out = net.run(demo.demo_input())
    check = demo.check(out[demo.OUTPUT_NAME])
    assert check.ok, (check.max_abs_diff, check.tolerance)
    np.testing.assert_array_equal(check.predicted, demo.expected_output().argmax(axis=1))
