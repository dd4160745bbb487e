"""Run a command with its output both on the terminal and in a file; exit with its status.

    python tools/run_logged.py LOG COMMAND [ARG ...]

nox runs pytest through it so that a run which dies without writing its JUnit report (a
signal in native code, the kernel's OOM killer, ``os._exit``) still leaves its last lines on
disk for the ``failures`` session to print. A command ended by signal N exits 128 + N, as a
shell reports it, and the log's last line says which signal.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    log_path, cmd = argv[0], argv[1:]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for chunk in iter(lambda: proc.stdout.read1(65536), b""):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()
            log.write(chunk)
            log.flush()
        rc = proc.wait()
        if rc < 0:
            name = signal.Signals(-rc).name if -rc in signal.valid_signals() else str(-rc)
            end = f"\n[{cmd[0]} was ended by signal {name}]\n".encode()
            sys.stdout.buffer.write(end)
            log.write(end)
            rc = 128 - rc
        log.write(f"[exit status {rc}]\n".encode())
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
