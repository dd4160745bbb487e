"""nnplug-conformance's pytest plugin comes with the distribution: its ``pytest11`` entry point
is declared here (not by nnplug), pytest loads it where the kit is installed (the
``--nnplug-*`` options exist, in this run and in a fresh one outside any project), and naming
the suite without saying what to test is a usage error, not a silent pass."""

import subprocess
import sys
from importlib import metadata

import pytest

from nnplug import InvalidArgumentError
from nnplug_conformance import conformance_command, plugin


def test_the_distribution_declares_the_pytest_plugin():
    eps = [ep for ep in metadata.distribution("nnplug-conformance").entry_points
           if ep.group == "pytest11"]
    assert [ep.value for ep in eps] == ["nnplug_conformance.plugin"], eps
    assert eps[0].load() is plugin


def test_the_plugin_is_loaded_into_this_run(request):
    assert request.config.pluginmanager.get_plugin("nnplug_conformance") is plugin
    assert request.config.getoption("nnplug_backend") is None  # its option, unset
    assert not plugin.active(request.config)  # inert: nothing named to test


def test_a_fresh_pytest_outside_any_project_has_the_options(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    for option in ("--nnplug-backend=NAME", "--nnplug-op-library=PATH", "--nnplug-report=FILE"):
        assert option in done.stdout, done.stdout[-3000:]


def test_naming_the_suite_without_a_subject_is_a_usage_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "nnplug_conformance",
                           "-p", "no:cacheprovider", "-q"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 4, done.stdout[-3000:] + done.stderr[-3000:]
    assert "nnplug_conformance: say what to test: --nnplug-backend NAME" in done.stderr, done.stderr


def test_run_conformance_needs_something_to_test():
    with pytest.raises(InvalidArgumentError, match="name a backend, backend_path, op or op_library"):
        conformance_command()
    assert conformance_command("cpu")[1:6] == ["-m", "pytest", "--pyargs", "nnplug_conformance",
                                               "-p"]
