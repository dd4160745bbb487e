"""During a run the pool's workers are kept off the CPU of the thread that runs it, and get
their own affinity back when it ends (threads.c: nnc_pool_hold, keep_apart). A virtual
machine's kernel can wake a sleeping worker onto its waker's CPU and leave it there while the
other CPU idles; one request at a time, with pauses between, paid it. Checked in a child
process while runs go on with pauses between them; a process bound to one CPU runs as
before."""

from __future__ import annotations

import os

import pytest

from nnplug_conformance.affinity import affinities_during_runs


def test_workers_run_off_the_callers_cpu_and_get_their_affinity_back():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the workers have nowhere apart to go")
    got = affinities_during_runs("cpu")
    assert got["placed"] == ["cpu"], got
    assert got["narrowed"], got  # a worker allowed fewer CPUs than the process, during runs
    assert all(len(m) < len(got["cpus"]) for m in got["narrowed"]), got
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got


def test_a_process_bound_to_one_cpu_runs_as_before():
    cpu = min(os.sched_getaffinity(0))
    got = affinities_during_runs("cpu", [cpu])
    assert got["cpus"] == [cpu] and got["placed"] == ["cpu"], got
    assert not got["narrowed"], got
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got
