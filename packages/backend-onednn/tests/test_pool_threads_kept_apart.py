"""During a run the pool's threads are kept off each other's CPUs, and every thread has its own
affinity back when the run ends (plan_run.c, dl_apart in dl.c). A virtual machine's kernel
can wake a sleeping pool thread onto its waker's CPU and leave both there for tens of
milliseconds; the runs after a pause then took three times as long. Checked in a child
process (affinities are process state) by nnplug_conformance.affinity: a sampling thread
reads every thread's affinity while the runs go on, with pauses between them; a process bound
to one CPU runs as before."""

from nnplug_conformance.affinity import assert_kept_apart_and_given_back


def test_threads_run_apart_and_get_their_affinity_back():
    got = assert_kept_apart_and_given_back("onednn")
    assert got["threads"] >= 2, got  # the OpenMP pool's thread beside the caller
