"""During a run the pool's threads are kept off each other's CPUs, and every thread has its own
affinity back when the run ends (plan_run.c, dl_apart in dl.c). A virtual machine's kernel
can wake a sleeping pool thread onto its waker's CPU and leave both there for tens of
milliseconds; the runs after a pause then took three times as long. Checked in a child
process (affinities are process state): a sampling thread reads every thread's affinity while
the runs go on, with pauses between them; a process bound to one CPU runs as before."""

from __future__ import annotations

import os

import pytest

from nnplug_conformance.affinity import affinities_during_runs


def test_threads_run_apart_and_get_their_affinity_back():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the pool's threads have nowhere apart to go")
    got = affinities_during_runs("onednn")
    assert got["placed"] == ["onednn"], got
    assert got["threads"] >= 2, got  # the OpenMP pool's thread beside the caller
    # seen during the runs: a thread allowed fewer CPUs than the process (the others' left out)
    assert got["narrowed"], got
    assert all(len(m) < len(got["cpus"]) for m in got["narrowed"]), got
    # and after them every thread, the caller's too, has the process's affinity again
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got


def test_a_process_bound_to_one_cpu_runs_as_before():
    cpu = min(os.sched_getaffinity(0))
    got = affinities_during_runs("onednn", [cpu])
    assert got["cpus"] == [cpu], got
    assert got["placed"] == ["onednn"], got
    assert not got["narrowed"], got  # no other CPU to keep a thread on: nothing changed
    assert got["all_given_back"] and got["callers_kept"], got
    assert got["max_diff"] <= 1e-4 * got["scale"], got
