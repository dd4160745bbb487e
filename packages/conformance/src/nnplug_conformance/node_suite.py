"""ONNX's node suite, whole: every case of the installed onnx, run on nnplug (with the given
backend preference) and on onnxruntime in the same run, each classified as

- ``pass``: every output of every data set matches (shape, dtype, values within tolerance);
- ``declined``: loading says no backend supports a node (``UnsupportedNodeError``);
- ``wrong``: it ran and an output differs;
- ``error``: any other failure (load or run);
- ``crash``: the process died or hung (cases run in child processes, a chunk each).

    python -m nnplug_conformance.node_suite --backends cpu --markdown table.md

Exits 1 when nnplug has a ``wrong``, ``error`` or ``crash`` case not listed in
``KNOWN_FAILURES`` for that backend preference (a list kept short and explained).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import warnings
from collections import Counter

import numpy as np

OUTCOMES = ("pass", "declined", "wrong", "error", "crash")
HANG_S = 120.0
"""A case that takes longer than this is killed and counted as a crash."""

# Failures known today, per backend preference (--backends): case name -> why, and who fixes
# it. They are counted and listed but do not fail the run; a listed case that passes is
# reported so its entry goes. A wrong answer belongs here only until the backend declines it.
# Empty today: the 72 opencl,cpu build errors (a Reshape or ConstantOfShape claimed although
# its shape was computed on the device) went when backend-opencl began declining such nodes.
KNOWN_FAILURES: dict[str, dict[str, str]] = {}


# -- one case ------------------------------------------------------------------------------
def _compare(name, got, want, rtol, atol):
    from .node_tests import compare

    if isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            return f"output {name!r}: expected a sequence of {len(want)} tensors"
        for k, (g, w) in enumerate(zip(got, want)):
            d = _compare(f"{name}[{k}]", g, w, rtol, atol)
            if d:
                return d
        return None
    if want is None:
        return None if got is None else f"output {name!r}: expected no value (empty optional)"
    if got is None:
        return f"output {name!r}: no value"
    return compare(name, np.asarray(got), np.asarray(want), rtol, atol)


def _raw(x):
    """A case value as onnxruntime takes it: arrays, lists of arrays (sequences), None."""
    import onnx
    from onnx import numpy_helper

    if isinstance(x, onnx.TensorProto):
        return numpy_helper.to_array(x)
    if isinstance(x, (list, tuple)):
        return [_raw(v) for v in x]
    if x is None or isinstance(x, np.ndarray):
        return x
    return np.asarray(x)


def _data(case):
    if case.data_sets is not None:
        return [([_raw(x) for x in ins], [_raw(y) for y in outs]) for ins, outs in case.data_sets]
    return list(case.datasets())


def _run_cases(model, data, prepare, run, declined_types, rtol, atol) -> tuple[str, str]:
    """(outcome, detail) of one case on one runtime."""
    inits = {t.name for t in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in inits]
    outs = [o.name for o in model.graph.output]
    try:
        session = prepare(model)
    except declined_types as e:
        return "declined", _first_line(e)
    except Exception as e:
        return "error", f"load: {type(e).__name__}: {_first_line(e)}"
    try:
        for k, (ins, want) in enumerate(data):
            feeds = {n: v for n, v in zip(names, ins)}
            try:
                got = run(session, feeds, outs)
            except Exception as e:
                return "error", f"run: {type(e).__name__}: {_first_line(e)}"
            for name, g, w in zip(outs, got, want):
                diff = _compare(name, g, w, rtol, atol)
                if diff:
                    return "wrong", f"data set {k}: {diff}"
        return "pass", ""
    finally:
        close = getattr(session, "close", None)
        if close is not None:
            close()


def _first_line(e) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:400]


class _Runners:
    """The two runtimes, created in the child process."""

    def __init__(self, backends: list[str]):
        import onnxruntime as ort

        import nnplug

        self.ort = ort
        self.nnplug = nnplug
        self.rt = nnplug.Runtime()
        self.backends = backends
        self.ort_options = ort.SessionOptions()
        self.ort_options.intra_op_num_threads = 1
        self.ort_options.log_severity_level = 4

    def nnplug_case(self, model, data, rtol, atol):
        def prepare(m):
            return self.rt.load(m, backends=self.backends)

        def run(net, feeds, outs):
            got = net.run(feeds)
            return [got[o] for o in outs]

        return _run_cases(model, data, prepare, run, (self.nnplug.UnsupportedNodeError,),
                          rtol, atol)

    def ort_case(self, model, data, rtol, atol):
        ort = self.ort

        def prepare(m):
            try:
                return ort.InferenceSession(m.SerializeToString(), self.ort_options,
                                            providers=["CPUExecutionProvider"])
            except Exception as e:
                raise _OrtDeclined(str(e)) from None

        def run(sess, feeds, outs):
            return sess.run(outs, feeds)

        return _run_cases(model, data, prepare, run, (_OrtDeclined,), rtol, atol)


class _OrtDeclined(Exception):
    """onnxruntime refuses the model at session creation (not implemented / invalid)."""


def _worker(indices, backends, queue) -> None:
    from . import node_tests

    warnings.simplefilter("ignore")
    runners = _Runners(backends)
    cases = node_tests.collect()
    for i in indices:
        case = cases[i]
        queue.put(("start", i))
        with np.errstate(all="ignore"):
            model = case.load_model()
            try:
                data = _data(case)
                ops = {n.op_type for n in model.graph.node}
                rtol, atol = node_tests.tolerance(ops, case.rtol, case.atol)
                mine = runners.nnplug_case(model, data, rtol, atol)
            except Exception as e:  # the runner itself: never silently a pass
                mine = ("error", f"runner: {type(e).__name__}: {_first_line(e)}")
            queue.put(("nnplug", i, mine))
            try:
                theirs = runners.ort_case(model, data, rtol, atol)
            except Exception as e:
                theirs = ("error", f"runner: {type(e).__name__}: {_first_line(e)}")
            queue.put(("ort", i, theirs))
        queue.put(("done", i))


# -- the whole run ---------------------------------------------------------------------------
def run_suite(backends: list[str], jobs: int = 2, chunk: int = 48, names=None,
              progress=None) -> dict:
    """{case name: {"nnplug": (outcome, detail), "ort": (outcome, detail)}} for every case."""
    from . import node_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        cases = node_tests.collect()
    todo = [i for i, c in enumerate(cases) if names is None or c.name in names]
    chunks = [todo[k:k + chunk] for k in range(0, len(todo), chunk)]
    ctx = multiprocessing.get_context("fork")  # children share the generated cases
    queue = ctx.Queue()
    results: dict[int, dict] = {}
    running: dict[int, tuple] = {}  # pid -> (process, chunk, current case, since)
    started = 0

    def launch(part):
        p = ctx.Process(target=_worker, args=(part, backends, queue), daemon=True)
        p.start()
        running[p.pid] = [p, list(part), None, time.monotonic()]

    while chunks or running:
        while chunks and len(running) < jobs:
            launch(chunks.pop(0))
        try:
            msg = queue.get(timeout=1.0)
        except Exception:
            msg = None
        if msg is not None:
            kind, i = msg[0], msg[1]
            owner = next((r for r in running.values() if i in r[1]), None)
            if kind == "start" and owner is not None:
                owner[2], owner[3] = i, time.monotonic()
            elif kind in ("nnplug", "ort"):
                results.setdefault(i, {})[kind] = msg[2]
            elif kind == "done" and owner is not None:
                owner[1].remove(i)
                owner[2] = None
                started += 1
                if progress and started % 100 == 0:
                    progress(f"{started}/{len(todo)} cases")
            continue
        for pid, (p, left, current, since) in list(running.items()):
            hung = current is not None and time.monotonic() - since > HANG_S
            if hung:
                p.kill()
            if p.is_alive() and not hung:
                continue
            p.join()
            _drain(queue, results)
            del running[pid]
            if current is not None and "ort" not in results.get(current, {}):
                why = f"hung over {HANG_S:g} s" if hung else f"exit code {p.exitcode}"
                r = results.setdefault(current, {})
                r.setdefault("nnplug", ("crash", why))
                r.setdefault("ort", ("crash", why))
                left = [i for i in left if i != current]
            left = [i for i in left if "ort" not in results.get(i, {})]
            if left:
                chunks.insert(0, left)
    return {cases[i].name: results.get(i, {"nnplug": ("crash", "no result"),
                                           "ort": ("crash", "no result")}) for i in todo}


def _drain(queue, results) -> None:
    while True:
        try:
            msg = queue.get_nowait()
        except Exception:
            return
        if msg[0] in ("nnplug", "ort"):
            results.setdefault(msg[1], {})[msg[0]] = msg[2]


def tally(results: dict) -> dict[str, Counter]:
    out = {"nnplug": Counter(), "ort": Counter()}
    for r in results.values():
        for who in out:
            out[who][r[who][0]] += 1
    return out


def table(results: dict, label: str) -> str:
    t = tally(results)
    rows = ["| runtime | " + " | ".join(OUTCOMES) + " | total |",
            "|---|" + "---:|" * (len(OUTCOMES) + 1)]
    for who, name in (("nnplug", f"nnplug ({label})"), ("ort", "onnxruntime (CPU)")):
        c = t[who]
        rows.append(f"| {name} | " + " | ".join(str(c[o]) for o in OUTCOMES)
                    + f" | {sum(c.values())} |")
    return "\n".join(rows)


def failures(results: dict, known: dict[str, str]) -> list[tuple[str, str, str]]:
    """nnplug's wrong/error/crash cases not in ``known``: (name, outcome, detail)."""
    return [(n, r["nnplug"][0], r["nnplug"][1]) for n, r in sorted(results.items())
            if r["nnplug"][0] in ("wrong", "error", "crash") and n not in known]


def declined_ops(results: dict, top: int = 25) -> list[tuple[str, int]]:
    """The op types named in nnplug's 'declined' messages, most cases first."""
    import re

    c = Counter()
    for r in results.values():
        outcome, detail = r["nnplug"]
        if outcome == "declined":
            m = re.search(r"\(op (\w+)", detail)
            c[m.group(1) if m else "?"] += 1
    return c.most_common(top)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m nnplug_conformance.node_suite",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--backends", default="cpu", help="preference order, comma-separated")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--markdown", help="write the table (and the failures) to this file")
    ap.add_argument("--json", help="write every case's outcome and message, both runtimes")
    ap.add_argument("-k", dest="names", help="only cases whose name contains this")
    ap.add_argument("-v", action="store_true", help="list every non-passing nnplug case")
    args = ap.parse_args(argv)
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    names = None
    if args.names:
        from . import node_tests

        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            names = {c.name for c in node_tests.collect() if args.names in c.name}
    t0 = time.monotonic()
    results = run_suite(backends, args.jobs, names=names,
                        progress=lambda s: print(s, file=sys.stderr, flush=True))
    took = time.monotonic() - t0
    label = ",".join(backends)
    text = table(results, label)
    print(text)
    print(f"\n{len(results)} cases in {took:.0f} s, {args.jobs} jobs, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    listed = KNOWN_FAILURES.get(label, {})
    bad = failures(results, listed)
    known = [(n, r["nnplug"][0]) for n, r in sorted(results.items())
             if n in listed and r["nnplug"][0] != "pass"]
    stale = [n for n, r in sorted(results.items()) if n in listed and r["nnplug"][0] == "pass"]
    if args.v:
        for n, r in sorted(results.items()):
            if r["nnplug"][0] != "pass":
                print(f"  {r['nnplug'][0]:8} {n}: {r['nnplug'][1]}")
    print(f"\nmost declined ops: {', '.join(f'{op} {n}' for op, n in declined_ops(results))}")
    if known:
        print(f"\n{len(known)} known failure(s) of {label} (KNOWN_FAILURES in "
              f"nnplug_conformance/node_suite.py), not counted as failing the run:")
        for reason in sorted({listed[n] for n, _ in known}):
            print(f"  {sum(listed[n] == reason for n, _ in known)} case(s): {reason}")
    for n in stale:
        print(f"NOW PASSES (remove it from KNOWN_FAILURES): {n}")
    for n, outcome, detail in bad:
        print(f"FAIL {outcome}: {n}: {detail}")
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
            if known:
                f.write(f"\nKnown failures (KNOWN_FAILURES in nnplug_conformance/node_suite.py): "
                        f"{len(known)} case(s) ({', '.join(sorted({o for _, o in known}))})\n")
            if bad:
                f.write("\nFailures: " + ", ".join(f"`{n}` ({o})" for n, o, _ in bad) + "\n")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
