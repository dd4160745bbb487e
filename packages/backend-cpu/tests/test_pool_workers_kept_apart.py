"""During a run the pool's workers are kept off the CPU of the thread that runs it, and get
their own affinity back when it ends (threads.c: nnc_pool_hold, keep_apart). A virtual
machine's kernel can wake a sleeping worker onto its waker's CPU and leave it there while the
other CPU idles; one request at a time, with pauses between, paid it. Checked in a child
process while runs go on with pauses between them (nnplug_conformance.affinity); a process
bound to one CPU runs as before."""

from nnplug_conformance.affinity import assert_kept_apart_and_given_back


def test_workers_run_off_the_callers_cpu_and_get_their_affinity_back():
    assert_kept_apart_and_given_back("cpu")
