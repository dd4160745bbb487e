"""Screening a native library in a child process before this process loads it.

A library runs its own code while it is loaded (constructors, the entry point, ``init``): if
that code crashes or aborts, it takes the process down with it, and no error handling can
catch it. :func:`probe` loads the library exactly as the host would, but in a fresh child
interpreter; a child that dies (a signal, an exit of its own, a hang) is reported as a
LibraryLoadError with stage ``crashed`` and the library is then not loaded here at all.
Used by ``CreationOptions(isolate_native=True)`` and ``nnplug doctor --isolate``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from . import strings
from .loader import LibraryLoadError

TIMEOUT_S = 60.0  # loading takes milliseconds; a minute means the library hangs
KINDS = ("backend", "op library")

# The child loads the library, then leaves at once: nothing after loading is under test.
_CHILD = """\
import os, sys
sys.path.insert(0, {root!r})
from nnplug.errors import NnplugError
from nnplug.native import loader, op_library
print("loading", flush=True)
try:
    if sys.argv[2] == "backend":
        loader.load_backend_library(sys.argv[1])
    else:
        op_library.load_op_library(sys.argv[1])
except NnplugError:
    pass  # an ordinary load error: the host reports it when it loads the library itself
sys.stdout.flush()
os._exit(0)
"""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def probe(path: str, kind: str = "backend", timeout: float = TIMEOUT_S) -> None:
    """Load ``path`` (a ``kind`` in KINDS) in a child process; LibraryLoadError if it dies."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    fix = (f"the {kind} crashes while it is loaded: do not install it (report it to its "
           f"authors); remove it from the folder so that no process loads it")
    try:
        r = subprocess.run([sys.executable, "-c", _CHILD.format(root=root), path, kind],
                           stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LibraryLoadError(path, "crashed", f"loading it in a child process did not finish "
                               f"in {timeout:g} s (it hangs)", fix) from None
    if r.returncode == 0:
        return
    said = r.stderr.decode("utf-8", "replace").strip().splitlines()
    tail = f"; its last words: {strings.shorten(said[-1])!r}" if said else ""
    if not r.stdout.startswith(b"loading"):  # the child died before it reached the library
        raise LibraryLoadError(path, "probe", f"the child process could not start{tail}",
                               f"check that {sys.executable} -c 'import nnplug' works")
    how = (f"died of {_signal_name(-r.returncode)}" if r.returncode < 0 else
           f"exited with status {r.returncode}")
    raise LibraryLoadError(path, "crashed",
                           f"loading it in a child process {how}{tail}", fix)


def probe_once(path: str, kind: str = "backend") -> None:
    """:func:`probe`, unless this process has the library loaded already (it survived that)."""
    from .. import plugins
    from .loader import lease_key

    if kind == "backend" and plugins.BACKENDS.count(lease_key(path)):
        return
    probe(path, kind)
