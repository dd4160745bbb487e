"""A native backend call that fails without a message names the backend and the call, and
says the backend gave no message (not "failed: no message"); the conformance suite's value
comparison prints numbers plainly (0.5, nan), not numpy's repr (np.float32(0.5))."""

import threading

import numpy as np
from nativelib import bare_runtime

from nnplug_conformance.node_tests import compare


def test_a_failure_without_a_message_says_the_backend_gave_none(libs):
    with bare_runtime() as rt:
        info = rt.register_backend(libs["testcpu"])
        lib = info.backend.library
        got = []
        # a fresh thread: the backend's last error is per thread, and earlier tests may have
        # left one on this thread (the library is loaded once for the whole run)
        worker = threading.Thread(target=lambda: got.append(
            lib.error(6, "running node 'relu' (op Relu)")))
        worker.start()
        worker.join()
    msg = str(got[0])
    assert msg.startswith("backend 'testcpu': running node 'relu' (op Relu) failed: "), msg
    assert "the backend gave no message" in msg and "SHAPE_ERROR" in msg, msg


def test_compared_values_print_as_plain_numbers():
    got = np.array([0.5, np.nan, 2], np.float32)
    want = np.array([0.5, 1.25, 2], np.float32)
    msg = compare("y", got, want, 1e-5, 1e-6)
    assert "got nan, expected 1.25" in msg and "np." not in msg, msg
    msg = compare("i", np.array([1, 2], np.int64), np.array([1, 3], np.int64), 0, 0)
    assert "got 2, expected 3" in msg and "np." not in msg, msg
