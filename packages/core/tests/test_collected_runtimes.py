"""Runtimes and networks the garbage collector releases at any moment (inside another
Runtime's backend registration, say) must not deadlock the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import gc, sys
    sys.path.insert(0, sys.argv[1])
    import nnplug
    from numpy_backend import NumpyBackend

    gc.set_threshold(1, 1, 1)  # collect at nearly every allocation
    for i in range(150):
        rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
        rt.register_backend(NumpyBackend())
        rt.cycle = rt  # only the collector frees it, whenever it runs next
        del rt
    print("done")
""")


def test_runtimes_freed_by_the_collector_during_registration_do_not_deadlock(tmp_path):
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.run([sys.executable, "-c", SCRIPT, here], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]
