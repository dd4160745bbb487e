"""Runs back to back find the pool's workers still polling on CPUs of their own, so the
outermost hold leaves their affinity alone (threads.c: nnc_pool_hold keeps them apart only
when one slept): the three system calls a worker it saves were 4-5 % of a small decoder's
step. Runs with pauses between still keep them apart (test_pool_workers_kept_apart)."""

from nnplug_conformance.affinity import assert_left_in_place_back_to_back


def test_back_to_back_runs_leave_the_workers_affinity_alone():
    assert_left_in_place_back_to_back("cpu")
