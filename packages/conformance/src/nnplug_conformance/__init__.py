"""``nnplug_conformance``: the conformance suite for backends and custom ops, as a pytest plugin
(``pip install nnplug-conformance``; its ``pytest11`` entry point loads only where it is installed).

Run it against an installed backend or op package::

    pytest --pyargs nnplug_conformance --nnplug-backend NAME
    pytest --pyargs nnplug_conformance --nnplug-backend-path build/libnnplug_mine.so
    pytest --pyargs nnplug_conformance --nnplug-op NAME

or from a test of your own package with :func:`run_conformance`. See docs/conformance.md.
"""

from __future__ import annotations

import os
import subprocess
import sys

from nnplug import InvalidArgumentError


def conformance_command(backend: str | None = None, *, backend_path: str | None = None,
                        op: str | None = None, op_library: str | None = None,
                        args=()) -> list[str]:
    """The pytest command line that runs the suite on the given backend and/or ops."""
    cmd = [sys.executable, "-m", "pytest", "--pyargs", "nnplug_conformance", "-p",
           "no:cacheprovider", "-q"]
    named = [[flag, os.fspath(value)] for flag, value in (
        ("--nnplug-backend", backend), ("--nnplug-backend-path", backend_path),
        ("--nnplug-op", op), ("--nnplug-op-library", op_library)) if value]
    if not named:
        raise InvalidArgumentError("name a backend, backend_path, op or op_library to test")
    return cmd + [part for pair in named for part in pair] + list(args)


def run_conformance(backend: str | None = None, *, backend_path: str | None = None,
                    op: str | None = None, op_library: str | None = None, args=(),
                    cwd: str | None = None, timeout: float = 1800) -> subprocess.CompletedProcess:
    """Run the suite in a child process; returns the finished process (``returncode`` 0 when
    every check passed, ``stdout`` with pytest's report and the summary table)."""
    cmd = conformance_command(backend, backend_path=backend_path, op=op, op_library=op_library,
                              args=args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          cwd=cwd or os.getcwd())


__all__ = ["conformance_command", "run_conformance"]
