"""Isolated native backends (``isolate_plugins`` / NNPLUG_ISOLATE_PLUGINS): a plugin that
crashes, hangs or exits while it loads or runs a kernel is an nnplug error, and the same Runtime
goes on running models, on other backends and on the crashed one (in a fresh worker).

The plugins are real .so files built from csrc/testbackend.c (TB_CTOR_ABORT, TB_ENTRY_SEGV,
TB_MISBEHAVE). The cases without isolation run in a child process: they end it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
from models import single_op
from nativelib import bare_runtime

from nnplug.errors import BackendError
from nnplug.native.isolated import IsolatedBackend, PluginCrashed

HERE = os.path.dirname(__file__)
# Under AddressSanitizer (the sanitize session preloads it) a segfault is ASan's report and
# then abort(): the process dies of SIGABRT.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
SEGV = "SIGABRT" if UNDER_ASAN else "SIGSEGV"
SEGV_RC = -6 if UNDER_ASAN else -11
RELU = single_op("Relu", [[2, 3]])
ADD = single_op("Add", [[2, 3], [2, 3]])
X = np.array([[1.5, -2.0, 3.0], [-0.5, 0.25, -7.0]], np.float32)


def _bad(value: float) -> np.ndarray:
    x = X.copy()
    x[0, 0] = value
    return x


@pytest.mark.parametrize("variant, signal_name, stage", [
    ("ctor_abort", "SIGABRT", "dlopen: the library's constructors"),
    ("entry_segv", SEGV, "entry point nnp_backend_entry"),
])
def test_a_plugin_that_crashes_while_loading_is_a_load_error(libs, variant, signal_name, stage):
    rt = bare_runtime(dynamic_backends_path=f"{os.path.dirname(libs[variant])}:"
                                            f"{os.path.dirname(libs['testcpu'])}",
                      isolate_plugins="*")
    try:
        assert list(rt.backends) == ["testcpu"]
        (err,) = rt.load_errors
        assert err.source == libs[variant] and err.stage == "crashed"
        assert f"died of {signal_name}" in err.reason and stage in err.reason
        # the Runtime goes on: the other (isolated) backend runs a model
        out = rt.load(RELU, backends=["testcpu"]).run({"in0": X})["out"]
        np.testing.assert_array_equal(out, np.maximum(X, 0))
    finally:
        rt.close()


@pytest.mark.parametrize("value, how, attrs", [
    (1001.0, f"died of {SEGV}", {"signal": SEGV}),  # writes 1 TiB past its output
    (1003.0, "exited with status 3", {"exit_status": 3}),  # calls exit(3)
    (1004.0, "died of SIGABRT", {"signal": "SIGABRT"}),
    (1002.0, "did not answer within 3 s", {"timed_out": True}),  # hangs: the user's timeout
])
def test_a_kernel_that_crashes_is_a_backend_error_and_the_runtime_goes_on(libs, value, how, attrs):
    rt = bare_runtime(isolate_plugins="testmisbehave", isolate_timeout=3)
    try:
        rt.register_backend(libs["misbehave"])
        rt.register_backend(libs["testcpu"])
        backend = rt.backends["testmisbehave"].backend
        assert isinstance(backend, IsolatedBackend)
        net = rt.load(RELU, backends=["testmisbehave"])
        np.testing.assert_array_equal(net.run({"in0": X})["out"], np.maximum(X, 0))
        first = backend.worker.pid
        with pytest.raises(PluginCrashed) as info:
            net.run({"in0": _bad(value)})
        e = info.value
        assert isinstance(e, BackendError)
        assert "backend 'testmisbehave'" in str(e) and how in str(e)
        assert "running node 'node' (op Relu)" in str(e) and e.doing == "running node 'node' (op Relu)"
        for k, v in attrs.items():
            assert getattr(e, k) == v
        # the same network runs again (a fresh worker builds its partition again) ...
        np.testing.assert_array_equal(net.run({"in0": X})["out"], np.maximum(X, 0))
        assert backend.worker.pid not in (None, first)
        # ... and the Runtime loads and runs other models, on this backend and another
        y = X[::-1].copy()
        for name in ("testmisbehave", "testcpu"):
            out = rt.load(ADD, backends=[name]).run({"in0": X, "in1": y})["out"]
            np.testing.assert_array_equal(out, X + y)
    finally:
        rt.close()


_OFF = """
import sys
import numpy as np
sys.path.insert(0, {tests!r})
from models import single_op
from nnplug import CreationOptions, Runtime
rt = Runtime(CreationOptions.isolated(isolate_plugins=False))
rt.register_backend(sys.argv[1])
net = rt.load(single_op("Relu", [[2, 3]]), backends=["testmisbehave"])
x = np.zeros((2, 3), np.float32)
x[0, 0] = float(sys.argv[2])
print("running", flush=True)
net.run({{"in0": x}})
print("survived", flush=True)
"""


@pytest.mark.parametrize("value, returncode", [
    pytest.param(1001.0, SEGV_RC, marks=pytest.mark.skipif(
        UNDER_ASAN, reason="under AddressSanitizer the wild write can land in its mapped shadow "
                           "memory and need not fault in the test process")),
    (1003.0, 3)])
def test_without_isolation_a_crashing_kernel_still_ends_the_process(libs, value, returncode):
    """Unchanged behaviour with isolation off (so it runs in a child process here)."""
    env = {k: v for k, v in os.environ.items() if k != "NNPLUG_ISOLATE_PLUGINS"}
    r = subprocess.run([sys.executable, "-c", _OFF.format(tests=os.path.dirname(HERE)),
                        libs["misbehave"], str(value)], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.stdout.startswith("running") and "survived" not in r.stdout, r.stderr
    assert r.returncode == returncode


def test_runs_from_many_threads_share_one_worker(libs):
    rt = bare_runtime(isolate_plugins=True)
    try:
        rt.register_backend(libs["misbehave"])
        net = rt.load(ADD, backends=["testmisbehave"])
        rng = np.random.default_rng(0)
        feeds = [(rng.standard_normal((2, 3)).astype(np.float32),
                  rng.standard_normal((2, 3)).astype(np.float32)) for _ in range(8)]
        errors = []

        def work(a, b):
            try:
                for _ in range(20):
                    out = net.run({"in0": a, "in1": b})["out"]
                    np.testing.assert_array_equal(out, a + b)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=f) for f in feeds]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors[0]
    finally:
        rt.close()


def test_a_close_on_another_thread_never_waits_for_the_workers_lock(libs):
    """Modules are closed by finalizers, which a garbage collection runs on whatever thread
    allocates. One ran while a thread was starting and waited for the worker's lock, whose
    holder was waiting for that thread to start: both waited for ever (a CI run hung so). A
    close that finds the lock taken is left to its holder, who runs it when it lets go."""
    rt = bare_runtime(isolate_plugins=True)
    try:
        rt.register_backend(libs["misbehave"])
        worker = rt.backends["testmisbehave"].backend.worker
        net = rt.load(ADD, backends=["testmisbehave"])
        np.testing.assert_array_equal(net.run({"in0": X, "in1": X})["out"], X + X)
        with worker.lock:  # this thread holds it, and waits for the one that closes
            closer = threading.Thread(target=net.close)
            closer.start()
            closer.join(30)
            assert not closer.is_alive(), "the close waited for the worker's lock"
            assert worker.lock.deferred  # left to this holder
        assert not worker.lock.deferred  # run when the holder let go
        with pytest.raises(Exception, match="closed"):
            net.run({"in0": X, "in1": X})
        # the worker goes on serving the Runtime's other networks
        other = rt.load(ADD, backends=["testmisbehave"])
        np.testing.assert_array_equal(other.run({"in0": X, "in1": X})["out"], X + X)
    finally:
        rt.close()


_LEFT_OPEN = """
import atexit, os, sys
pids = []
# registered first, so it runs last of the exit handlers: after nnplug's
atexit.register(lambda: print("worker gone" if not os.path.exists(f"/proc/{pids[0]}")
                              else "worker still running", flush=True))
import numpy as np
from models import single_op
from nativelib import bare_runtime
rt = bare_runtime(isolate_plugins=True)
rt.register_backend(sys.argv[1])
net = rt.load(single_op("Relu", [[2, 3]]), backends=["testmisbehave"])
net.run({"in0": np.ones((2, 3), np.float32)})
pids.append(rt.backends["testmisbehave"].backend.worker.pid)
"""  # nothing closed: the Runtime, the network and the worker are alive at exit


def test_a_worker_alive_at_exit_is_stopped_before_the_interpreter_finalizes(libs):
    """Otherwise it ends only when finalization closes its socket, and its stderr forwarder (a
    daemon thread) wakes while the interpreter is being torn down."""
    path = [HERE, os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    r = subprocess.run([sys.executable, "-c", _LEFT_OPEN, libs["misbehave"]], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.strip() == "worker gone", r.stdout


def test_the_environment_variable_names_backends_by_id_or_file_name(libs, monkeypatch):
    for value in ("testmisbehave", os.path.basename(libs["misbehave"]), "*"):
        monkeypatch.setenv("NNPLUG_ISOLATE_PLUGINS", value)
        rt = bare_runtime()
        try:
            rt.register_backend(libs["misbehave"])
            rt.register_backend(libs["testcpu"])
            assert isinstance(rt.backends["testmisbehave"].backend, IsolatedBackend), value
            assert isinstance(rt.backends["testcpu"].backend, IsolatedBackend) == (value == "*")
        finally:
            rt.close()


@pytest.mark.parametrize("variant", ["testdev", "testown"])
def test_a_device_backend_runs_isolated_on_its_own_device(libs, variant):
    """A backend of its own device memory (handles, not pointers) runs in the worker: its
    tensors cross through host shared memory and the worker moves them to the device and
    back; the Runtime still sees the device (its type and attributes)."""
    rt = bare_runtime(dynamic_backends_path=os.path.dirname(libs[variant]),
                      isolate_plugins=variant)
    try:
        assert rt.load_errors == []
        backend = rt.backends[variant].backend
        assert isinstance(backend, IsolatedBackend)
        (dev,) = [d for d in rt.devices() if d.backend == variant]
        in_process = bare_runtime(dynamic_backends_path=os.path.dirname(libs[variant]))
        try:
            assert [d for d in in_process.devices() if d.backend == variant] == [dev]
        finally:
            in_process.close()
        assert str(dev.device) == "testdev:0"
        y = X[::-1].copy()
        for model, feeds, want in ((RELU, {"in0": X}, np.maximum(X, 0)),
                                   (ADD, {"in0": X, "in1": y}, X + y)):
            net = rt.load(model, backends=[variant])
            assert set(net.assignment.values()) == {variant}
            np.testing.assert_array_equal(net.run(feeds)["out"], want)
    finally:
        rt.close()


def test_a_device_backend_that_crashes_is_a_backend_error_and_the_runtime_goes_on(libs):
    rt = bare_runtime(isolate_plugins="testmisbehavedev", isolate_timeout=3)
    try:
        rt.register_backend(libs["misbehave_dev"])
        net = rt.load(RELU, backends=["testmisbehavedev"])
        np.testing.assert_array_equal(net.run({"in0": X})["out"], np.maximum(X, 0))
        with pytest.raises(PluginCrashed, match="died of SIGABRT"):
            net.run({"in0": _bad(1004.0)})
        np.testing.assert_array_equal(net.run({"in0": X})["out"], np.maximum(X, 0))
    finally:
        rt.close()


def test_a_forked_child_starts_a_worker_of_its_own(libs):
    """After fork() the parent's worker is not the child's: the child's runs start their own
    (interleaved requests on one channel would mix up answers)."""
    rt = bare_runtime(isolate_plugins=True)
    try:
        rt.register_backend(libs["misbehave"])
        net = rt.load(ADD, backends=["testmisbehave"])
        y = X[::-1].copy()
        np.testing.assert_array_equal(net.run({"in0": X, "in1": y})["out"], X + y)
        parent_worker = rt.backends["testmisbehave"].backend.worker.pid
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when its run is right and not the parent's worker
            code = 3
            try:
                ok = np.array_equal(net.run({"in0": y, "in1": y})["out"], y + y)
                code = 0 if ok and rt.backends["testmisbehave"].backend.worker.pid != parent_worker \
                    else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        np.testing.assert_array_equal(net.run({"in0": X, "in1": X})["out"], X + X)
        assert rt.backends["testmisbehave"].backend.worker.pid == parent_worker
    finally:
        rt.close()


class _Interrupted(BaseException):  # as KeyboardInterrupt
    pass


def test_an_interrupted_run_leaves_no_reply_behind(libs):
    """An exception while the application waits (here from a signal handler, as Ctrl-C) ends
    that worker: its late reply must never be taken for the next run's."""
    import signal

    def interrupt(signum, frame):
        raise _Interrupted()

    rt = bare_runtime(isolate_plugins=True)
    old = signal.signal(signal.SIGALRM, interrupt)
    try:
        rt.register_backend(libs["misbehave"])
        net = rt.load(RELU, backends=["testmisbehave"])
        worker = rt.backends["testmisbehave"].backend.worker
        first = worker.pid
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(_Interrupted):
            net.run({"in0": _bad(1002.0)})  # hangs until interrupted
        assert worker.pid is None  # the worker in mid-request was stopped
        np.testing.assert_array_equal(net.run({"in0": X})["out"], np.maximum(X, 0))
        assert worker.pid not in (None, first)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        rt.close()
