"""Runs back to back find the pool's workers still polling on CPUs of their own, so the
outermost hold leaves their affinity alone (threads.c: nnc_pool_hold keeps them apart only
when one slept): the three system calls a worker it saves were 4-5 % of a small decoder's
step. Runs with pauses between still keep them apart (test_pool_workers_kept_apart)."""

import os

import pytest

from nnplug_conformance.affinity import assert_left_in_place_back_to_back

# Timing, which a sanitizer changes: in the sanitize session (AddressSanitizer preloaded)
# every run kept the workers apart (0.999 of readings narrowed), most likely because its
# slower allocations and checks let the workers outlast their 250 us awake and sleep between
# runs, the case in which keeping them apart is meant to happen.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")


@pytest.mark.skipif(UNDER_ASAN, reason="under AddressSanitizer the workers sleep between runs")
def test_back_to_back_runs_leave_the_workers_affinity_alone():
    assert_left_in_place_back_to_back("cpu")
