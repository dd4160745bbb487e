"""Fixtures and hooks of the conformance suite. Active only when a backend or op is named
(``--nnplug-backend``, ``--nnplug-backend-path``, ``--nnplug-op``, ``--nnplug-op-library``)."""

from __future__ import annotations

import pytest

from . import node_tests
from .plugin import active
from .summary import Tally

_subject_key = pytest.StashKey[object]()
_tally_key = pytest.StashKey[Tally]()


_BACKEND_MODULES = {"test_registration.py", "test_device_api.py", "test_edge_values.py"}


def pytest_ignore_collect(collection_path, config):
    if not active(config):
        return True  # collected by accident (e.g. a plain `pytest` over a source tree): stay out
    backend = config.getoption("nnplug_backend") or config.getoption("nnplug_backend_path")
    ops = config.getoption("nnplug_op") or config.getoption("nnplug_op_library")
    name = collection_path.name
    if (name in _BACKEND_MODULES and not backend) or (name == "test_custom_ops.py" and not ops):
        return True  # checks of the other kind of plugin
    if name == "test_onnx_nodes.py" and not backend:
        from nnplug.customop import is_standard_op

        if not any(is_standard_op(t) for t in subject(config).op_types):
            return True  # no standard op overridden: ONNX has no node tests for these ops
    return None


_tallies: list[Tally] = []  # the current session's (pytest_runtest_logreport gets no config)


def pytest_configure(config):
    if active(config):
        config.stash[_tally_key] = Tally()
        _tallies.append(config.stash[_tally_key])


def subject(config):
    """The Subject under test, opened once per session."""
    if _subject_key not in config.stash:
        from .subject import SubjectError, open_subject

        try:
            config.stash[_subject_key] = open_subject(
                backend=config.getoption("nnplug_backend"),
                backend_path=config.getoption("nnplug_backend_path"),
                op=config.getoption("nnplug_op"),
                op_library=config.getoption("nnplug_op_library"))
        except SubjectError as e:
            config.stash[_subject_key] = e
    s = config.stash[_subject_key]
    if isinstance(s, Exception):
        pytest.exit(f"nnplug_conformance: {s}", returncode=4)
    return s


def tolerance_overrides(config) -> dict:
    out = {}
    for text in config.getoption("nnplug_tolerance") or []:
        try:
            op, _, values = text.partition("=")
            rtol, atol = (float(v) for v in values.split(","))
        except ValueError:
            raise pytest.UsageError(f"--nnplug-tolerance {text!r}: write OP=RTOL,ATOL") from None
        out[op.strip()] = (rtol, atol)
    return out


@pytest.fixture(scope="session")
def nnplug_subject(request):
    return subject(request.config)


@pytest.fixture(scope="session")
def nnplug_backend(nnplug_subject):
    if nnplug_subject.backend is None:
        pytest.skip("no backend under test (pass --nnplug-backend NAME)")
    return nnplug_subject.backend.backend


@pytest.fixture(scope="session")
def nnplug_device(nnplug_backend):
    from nnplug import Target

    return Target(nnplug_backend.target_kind_name).device


@pytest.fixture(scope="session")
def nnplug_device_api(nnplug_backend):
    if getattr(nnplug_backend, "worker", None) is not None and not hasattr(nnplug_backend, "library"):
        pytest.skip("the backend runs isolated in a worker process (NNPLUG_ISOLATE_PLUGINS / "
                    "isolate_plugins): the application's tensors are host memory of its own, so "
                    "the backend's device API is checked in a run without isolation")
    return nnplug_backend.device_api()


def pytest_generate_tests(metafunc):
    if "node_case" not in metafunc.fixturenames:
        return
    config = metafunc.config
    only = {s.strip() for s in (config.getoption("nnplug_only_ops") or "").split(",") if s.strip()}
    expanded = config.getoption("nnplug_expanded")
    cases = [c for c in node_tests.collect() if expanded or not c.expanded]
    s = subject(config)
    if s.backend is None:  # ops only: the node tests of the standard ops they override
        cases = [c for c in cases if set(c.op_types) & set(s.op_types)]
    if only:
        cases = [c for c in cases if set(c.op_types) & only]
    metafunc.parametrize("node_case", cases, ids=[c.name for c in cases])


def pytest_collection_modifyitems(config, items):
    for item in items:
        case = getattr(item, "callspec", None) and item.callspec.params.get("node_case")
        if isinstance(case, node_tests.NodeCase):
            item.user_properties.append(("nnplug_ops", case.op_types))


def pytest_runtest_logreport(report):
    if _tallies:
        _tallies[-1].record(report)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tally = config.stash.get(_tally_key, None)
    if tally is None or not tally.outcome:
        return
    s = config.stash.get(_subject_key, None)
    title = f"nnplug conformance: {s.describe()}" if s is not None and not isinstance(s, Exception) \
        else "nnplug conformance"
    terminalreporter.write_sep("=", "nnplug conformance summary")
    for line in tally.text(title):
        terminalreporter.write_line(line)
    path = config.getoption("nnplug_report")
    if path:
        with open(path, "w") as f:
            f.write(tally.markdown(title))
        terminalreporter.write_line(f"(Markdown table written to {path})")


def pytest_unconfigure(config):
    tally = config.stash.get(_tally_key, None)
    if tally is not None and tally in _tallies:
        _tallies.remove(tally)
    s = config.stash.get(_subject_key, None)
    if s is not None and not isinstance(s, Exception):
        s.close()
