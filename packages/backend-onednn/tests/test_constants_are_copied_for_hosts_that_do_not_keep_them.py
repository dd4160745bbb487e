"""A host of ABI 1.8 keeps its constants for each kernel's life (NNP_HOST_KEEPS_CONSTANTS), and
this backend reads them there; for an older host it copies those its plans read. That path is
taken here with NNPLUG_ONEDNN_COPY_CONSTANTS=1: the tests of folded BatchNormalizations, of
Winograd and direct convolutions, of the strict graph (non-finite inputs, which plans again
from the copies) and of partitions with symbolic shapes (planned at run time, after
kernel_create returned) pass on the copies too."""

from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODULES = ["test_batch_norm_matches_onnxruntime.py",
           "test_winograd_convolutions_match_onnxruntime.py",
           "test_nonfinite_inputs_match_onnxruntime.py",
           "test_partitions_match_onnxruntime.py",
           "test_reshape_views_match_onnxruntime.py"]


def test_the_copying_path_passes_the_same_tests():
    env = dict(os.environ, NNPLUG_ONEDNN_COPY_CONSTANTS="1")
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        *[os.path.join(HERE, m) for m in MODULES]],
                       cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout, r.stdout[-500:]
