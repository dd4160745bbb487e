"""The conformance suite's NULL-argument checks run in child processes: a backend that crashes
on one call fails that one check, named, and the checks of the other calls still run (and
pass, when they should), instead of every check of the group failing with the crash."""

import re

import pytest
from nativelib import compile_backend

from nnplug_conformance import run_conformance

pytestmark = pytest.mark.slow


def test_a_crash_is_one_failure_naming_the_call(tmp_path):
    lib = compile_backend("testbackend.c", str(tmp_path / "libnnplug_nullcrash.so"),
                          ["-DTB_HOST_VISIBLE=1", '-DTB_ID="nullcrash"', "-DTB_NULL_NODE_CRASH=1"])
    result = run_conformance(backend_path=lib, cwd=str(tmp_path), timeout=600,
                             args=["-k", "broken_call or unknown_attribute_kind_is_none", "-rfp"])
    out = result.stdout
    assert result.returncode == 1, out[-4000:]
    assert re.search(r"\b1 failed, 6 passed\b", out), out[-4000:]
    failed = re.findall(r"^FAILED (\S+)", out, re.M)
    assert len(failed) == 1 and failed[0].endswith("test_broken_call_reports_an_error[supports(NULL"), failed
    assert "supports(NULL node): the call crashed the process" in out, out[-4000:]
    for fine in ("supports(NULL result)", "kernel_create(NULL nodes)", "get_attr(NULL out)"):
        assert re.search(rf"^PASSED \S+\[{re.escape(fine)}\]", out, re.M), (fine, out[-4000:])
