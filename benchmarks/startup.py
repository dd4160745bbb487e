"""Start-up cost: ``import nnplug``, ``Runtime()``, and a first session on the bundled demo
model, beside onnxruntime, each in a fresh interpreter.

    python benchmarks/startup.py [--runs 15]
    python benchmarks/startup.py --models light_resnet50.onnx bert-base.onnx [--runs 5]

Every case runs ``--runs`` times in its own new process; the cases take turns (one run of
each, repeated), so load from other processes hits them alike. A child times only the
statement (the interpreter's own start is the same for both engines) and the figure is the
median. The load average is printed beside every figure: only figures taken at a load near 0
are results.

With ``--models``, session creation alone on those model files, in this one process: after a
warm-up session each (so one-time costs, ``import onnx`` and the plugins' first load, are left
out), nnplug's default session, nnplug on ``providers=["cpu"]``, the same two with the plan cache (``cached``: the
warm-up writes its entries, so these are second creations) and onnxruntime's take turns
``--runs`` times, and the figure is the fastest run (the machine's load only adds time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import nnplug.demo
import nnplug.plan_cache

MODEL = nnplug.demo.MODEL

CASES = {
    "import nnplug": ("import nnplug", ""),
    "import nnplug; Runtime()": ("import nnplug", "nnplug.Runtime()"),
    "import onnxruntime": ("import onnxruntime", ""),
    "nnplug InferenceSession(demo)": (
        "import nnplug", f"nnplug.InferenceSession({MODEL!r}, providers=['CPUExecutionProvider'])"),
    "onnxruntime InferenceSession(demo)": (
        "import onnxruntime",
        f"onnxruntime.InferenceSession({MODEL!r}, providers=['CPUExecutionProvider'])"),
}
"""name -> (import, then what else): a child times both together."""

CHILD = """
import time
t0 = time.perf_counter()
{0}
{1}
print(time.perf_counter() - t0)
"""


# Children may write bytecode caches, as an installed package has them: without, every start of
# an editable install would compile nnplug's sources again.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(case: str) -> float:
    code = CHILD.format(*CASES[case])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=CHILD_ENV)
    if done.returncode != 0:
        raise SystemExit(f"{case!r} failed:\n{done.stderr}")
    return float(done.stdout.split()[-1])


def sessions(plan_cache: str) -> dict:
    """name -> how that engine makes a session of a model file (timed in this process);
    the "cached" engines keep their plan cache in ``plan_cache`` (written by the warm-up)."""
    so = nnplug.SessionOptions()
    so.add_session_config_entry(nnplug.plan_cache.CONFIG_KEY, plan_cache)
    return {
        "nnplug": lambda path: nnplug.InferenceSession(path),
        "nnplug cpu": lambda path: nnplug.InferenceSession(path, providers=["cpu"]),
        "cached": lambda path: nnplug.InferenceSession(path, so),
        "cpu cached": lambda path: nnplug.InferenceSession(path, so, providers=["cpu"]),
        "onnxruntime": lambda path: _ort_session(path),
    }


def _ort_session(path):
    import onnxruntime

    so = onnxruntime.SessionOptions()
    so.log_severity_level = 3  # its warnings about unused initializers would fill the table
    return onnxruntime.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def time_sessions(paths: list[str], runs: int) -> int:
    with tempfile.TemporaryDirectory(prefix="nnplug-plans-") as plans:
        return _time_sessions(paths, runs, sessions(plans))


def _time_sessions(paths: list[str], runs: int, engines: dict) -> int:
    print(f"session creation, fastest of {runs} in one process after a warm-up "
          f"(import onnx and the plugins' first load excluded)")
    print("'cached': with the plan cache (its entry written by the warm-up); ratios are "
          "to onnxruntime: default, cpu, cached, cpu cached")
    print(f"{'model':<20}" + "".join(f"{e:>13}" for e in engines)
          + f"{'ratios':>26}   load average")
    for path in paths:
        best = {}
        for make in engines.values():  # warm-up: file cache, imports, plugins
            make(path)
        for _ in range(runs):
            for engine, make in engines.items():
                t0 = time.perf_counter()
                make(path)
                t = time.perf_counter() - t0
                best[engine] = min(best.get(engine, t), t)
        ort = best["onnxruntime"]
        ratios = " ".join(f"{best[e] / ort:.2f}" for e in engines if e != "onnxruntime")
        print(f"{os.path.basename(path):<20}" + "".join(f"{best[e]:>12.3f}s" for e in engines)
              + f"{ratios:>26}   {os.getloadavg()[0]:.2f}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--models", nargs="+", metavar="PATH",
                    help="time session creation on these .onnx files instead")
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    if args.models:
        return time_sessions(args.models, args.runs)
    times: dict[str, list[float]] = {c: [] for c in CASES}
    loads: dict[str, list[float]] = {c: [] for c in CASES}
    for c in CASES:  # warm the file and bytecode caches: a first start reads and compiles
        run_once(c)
    for _ in range(args.runs):
        for c in CASES:
            times[c].append(run_once(c))
            loads[c].append(os.getloadavg()[0])
    ms = {c: statistics.median(t) * 1e3 for c, t in times.items()}
    load = {c: max(v) for c, v in loads.items()}

    print(f"start-up, median of {args.runs} fresh processes per case (python {sys.version.split()[0]})")
    print(f"{'case':<38}{'ms':>9}   load average (1 min, highest during the case)")
    for c in CASES:
        print(f"{c:<38}{ms[c]:>9.1f}   {load[c]:.2f}")

    def ratio(text: str, a: str, b: str, value: float) -> None:
        print(f"{text:<52}{value:>6.2f}   load average {max(load[a], load[b]):.2f}")

    print()
    ratio("import nnplug / import onnxruntime", "import nnplug", "import onnxruntime",
          ms["import nnplug"] / ms["import onnxruntime"])
    extra = ms["import nnplug; Runtime()"] - ms["import nnplug"]
    print(f"{'Runtime() after the import, ms':<52}{extra:>6.1f}   load average "
          f"{max(load['import nnplug; Runtime()'], load['import nnplug']):.2f}")
    ratio("first session: nnplug / onnxruntime", "nnplug InferenceSession(demo)",
          "onnxruntime InferenceSession(demo)",
          ms["nnplug InferenceSession(demo)"] / ms["onnxruntime InferenceSession(demo)"])
    worst = max(load.values())
    if worst > 0.5:
        print(f"\nthe load average reached {worst:.2f}: these figures were taken under load and "
              f"are not results; take them again on an idle machine")
    rt = nnplug.Runtime()
    print(f"\nplugins: backends {', '.join(rt.backends) or 'none'}; ops "
          f"{', '.join(rt.ops) or 'none'}; load errors {len(rt.load_errors)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
