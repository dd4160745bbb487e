"""Native custom-op libraries in a worker process (``isolate_plugins`` naming the library or one
of its op types): an op whose compute crashes or exits is an nnplug error naming the op and the
node, and the Runtime goes on; a library that aborts while loading is a load error.

The cases without isolation run in a child process: they end it.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from models import single_op
from numpy_backend import NumpyBackend, make_runtime

from nnplug.errors import BackendError, CustomOpError
from nnplug.native.isolated import IsolatedCustomOp, PluginCrashed

HERE = os.path.dirname(__file__)
# The crashing op stores to NULL: under the sanitize session's runtimes (preloaded) that is
# UndefinedBehaviorSanitizer's report and exit(1) instead of a segfault.
UNDER_SANITIZERS = "libasan" in os.environ.get("LD_PRELOAD", "")
NULL_STORE = "exited with status 1" if UNDER_SANITIZERS else "died of SIGSEGV"
NULL_STORE_RC = 1 if UNDER_SANITIZERS else -11
GOOD = np.array([1, 2, 3], np.float32)


@pytest.mark.parametrize("value, how", [(1001.0, NULL_STORE),
                                        (1003.0, "exited with status 3")])
def test_an_op_that_crashes_is_an_error_and_the_runtime_goes_on(op_libs, value, how):
    with make_runtime(NumpyBackend(), isolate_plugins="cstFail") as rt:
        rt.register_custom_ops_library(op_libs["crash"])
        assert isinstance(rt.ops["cstFail"], IsolatedCustomOp)
        net = rt.load(single_op("cstFail", [[3]], domain="t"))
        np.testing.assert_array_equal(net.run({"in0": GOOD})["out"], GOOD)
        with pytest.raises(PluginCrashed) as e:
            net.run({"in0": np.array([value, 2, 3], np.float32)})
        assert isinstance(e.value, BackendError)
        text = str(e.value)
        assert "custom-op library" in text and how in text
        assert e.value.doing == "running custom op 'cstFail' on node 'node'"
        # a fresh worker binds the node again; the library's other ops and the backend run too
        np.testing.assert_array_equal(net.run({"in0": GOOD})["out"], GOOD)
        scale = rt.load(single_op("cstScale", [[3]], {"scale": 3.0}, domain="t"))
        np.testing.assert_allclose(scale.run({"in0": GOOD})["out"], GOOD * 3)
        relu = rt.load(single_op("Relu", [[1, 3]]))
        np.testing.assert_array_equal(relu.run({"in0": -GOOD[None]})["out"], 0 * GOOD[None])


def test_an_op_error_is_still_the_ops_error(op_libs):
    """A callback that fails (no crash) gives the same CustomOpError as in process."""
    with make_runtime(NumpyBackend(), isolate_plugins=True) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(single_op("cstFail", [[3]], domain="t"))
        with pytest.raises(CustomOpError) as e:
            net.run({"in0": -GOOD})
        assert "negative first element" in str(e.value) and "'node'" in str(e.value)


def test_a_library_that_aborts_while_loading_is_a_load_error(op_libs):
    folders = f"{os.path.dirname(op_libs['ctor_abort'])}:{os.path.dirname(op_libs['good'])}"
    with make_runtime(NumpyBackend(), custom_op_paths=folders, isolate_plugins="*") as rt:
        (err,) = rt.load_errors
        assert err.source == op_libs["ctor_abort"] and err.stage == "crashed"
        assert "died of SIGABRT" in err.reason and "constructors" in err.reason
        assert sorted(rt.ops) == ["Relu", "cstFail", "cstScale"]  # the good library's
        net = rt.load(single_op("cstScale", [[3]], {"scale": 2.0}, domain="t"))
        np.testing.assert_allclose(net.run({"in0": GOOD})["out"], GOOD * 2)


def test_ops_named_by_file_or_op_type_only_are_isolated(op_libs):
    for names, isolated in (("cstScale", True), (os.path.basename(op_libs["good"]), True),
                            ("someOtherOp", False), ("", False)):
        with make_runtime(NumpyBackend(), isolate_plugins=names) as rt:
            rt.register_custom_ops_library(op_libs["good"])
            assert isinstance(rt.ops["cstScale"], IsolatedCustomOp) == isolated, names
            net = rt.load(single_op("cstScale", [[3]], {"scale": 0.5}, domain="t"))
            np.testing.assert_allclose(net.run({"in0": GOOD})["out"], GOOD * 0.5)


_OFF = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from models import single_op
from numpy_backend import NumpyBackend, make_runtime
rt = make_runtime(NumpyBackend(), isolate_plugins=False)
rt.register_custom_ops_library(sys.argv[1])
net = rt.load(single_op("cstFail", [[3]], domain="t"))
print("running", flush=True)
net.run({{"in0": np.array([float(sys.argv[2]), 2, 3], np.float32)}})
print("survived", flush=True)
"""


@pytest.mark.parametrize("value, returncode", [(1001.0, NULL_STORE_RC), (1003.0, 3)])
def test_without_isolation_a_crashing_op_still_ends_the_process(op_libs, value, returncode):
    env = {k: v for k, v in os.environ.items() if k != "NNPLUG_ISOLATE_PLUGINS"}
    r = subprocess.run([sys.executable, "-c", _OFF.format(tests=os.path.dirname(HERE)),
                        op_libs["crash"], str(value)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.stdout.startswith("running") and "survived" not in r.stdout, r.stderr
    assert r.returncode == returncode
