"""A Runtime, network and outputs still alive when the interpreter exits (held in a reference
cycle, so only the final collection frees them) are released without a word on stderr."""

import os
import subprocess
import sys

HERE = os.path.dirname(__file__)

SCRIPT = """
import gc, sys
import numpy as np
from nativelib import bare_runtime
from test_end_to_end import mlp

class Holder:
    pass

h = Holder()
h.cycle = h
h.rt = bare_runtime()
h.rt.register_backend(sys.argv[1])
h.net = h.rt.load(mlp(), backends=["testcpu"])
h.out = h.net.run({"x": np.ones((2, 8), np.float32)})
gc.disable()  # nothing collects the cycle before the interpreter tears down
print("ran", sorted(set(h.net.assignment.values())))
"""


def test_objects_alive_at_exit_are_released_silently(libs):
    path = [HERE, os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    r = subprocess.run([sys.executable, "-c", SCRIPT, libs["testcpu"]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "ran ['testcpu'" in r.stdout
    assert r.stderr == "", r.stderr
