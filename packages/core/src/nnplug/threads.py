"""The one thread-count rule: ``NNPLUG_NUM_THREADS`` read the same way by every plugin kind."""

from __future__ import annotations

import logging
import os

NUM_THREADS_ENV_VAR = "NNPLUG_NUM_THREADS"

log = logging.getLogger("nnplug")


def requested_threads() -> int:
    """The thread count the user asked for: ``NNPLUG_NUM_THREADS`` as a positive integer, else
    0 (unset, 0, or not an integer: the plugin's own default; a bad value is logged)."""
    text = os.environ.get(NUM_THREADS_ENV_VAR, "").strip()
    if not text:
        return 0
    try:
        return max(0, int(text))
    except ValueError:
        log.warning("nnplug: ignoring %s=%r (not an integer)", NUM_THREADS_ENV_VAR, text)
        return 0


def available_cores() -> int:
    """The cores this process may run on (its CPU affinity, not the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_count() -> int:
    """The count to hand a plugin that needs a number: the requested one, else every core."""
    return requested_threads() or available_cores()
