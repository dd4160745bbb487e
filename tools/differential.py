"""Differential proof: nnplug against onnxruntime on every zoo model (shipped and random
weights), every .onnx this repository ships, ONNX's whole node suite and the non-finite
cases (nnplug_conformance.nonfinite: NaN, infinities and values near float32's limits through
every op a backend may claim), under every setting that changes the cpu backend's code path.

    python tools/differential.py                     # every setting, every installed backend
    python tools/differential.py --settings unset:1 --only zoo --backends cpu

Each setting (``OPENBLAS_CORETYPE`` unset, Haswell, Zen, SkylakeX where the CPU has
avx512f; 1 and 2 backend threads; the cpu backend's vector kernels capped by
``NNPLUG_CPU_ISA`` at avx2 where the CPU has AVX-512, and its portable C kernels) runs in its
own child process, since OpenBLAS reads the core type, and the backend its kernel level, once
per process. References come from onnxruntime once, in the parent; where
onnxruntime cannot run a node case, ONNX's own expected outputs are the reference.

A case is *matched*, *declined* (nnplug raised one of its own errors: it does not run that
model, which is allowed), or *wrong* (an output differs beyond tolerance from onnxruntime and
from ONNX's expected output). A child that dies, a non-nnplug exception, or any wrong answer
fails the run (exit 1). Tolerances: the node suite's per-op ones (``nnplug_conformance``), and
1e-4 of the output's range for whole models.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proofcases  # noqa: E402

from nnplug_conformance.zoo import randomize_weights  # noqa: E402

CORETYPES = ["unset", "Haswell", "Zen", "SkylakeX"]
THREADS = [1, 2]
MODEL_RTOL = 1e-4
CHILD_TIMEOUT_S = 1800


# -- cases and references (parent) -----------------------------------------------------------
def collect_cases(only: str | None, limit: int | None) -> list[dict]:
    cases = []
    if only in (None, "zoo"):
        for name in proofcases.zoo_names():
            shipped = proofcases.zoo_model(name)
            for label, model in ((f"zoo/{name}", shipped),
                                 (f"zoo/{name}+random", randomize_weights(shipped, 7))):
                cases.append({"name": label, "model": model.SerializeToString(), "kind": "model",
                              "datasets": [(proofcases.random_inputs(model, seed=3), None)]})
        for path in proofcases.shipped_models():
            model = onnx.load(path)
            feeds = proofcases.random_inputs(model, seed=3)
            if feeds is not None:
                cases.append({"name": f"repo/{os.path.relpath(path, proofcases.ROOT)}",
                              "model": model.SerializeToString(), "kind": "model",
                              "datasets": [(feeds, None)]})
    if only in (None, "nonfinite"):
        from nnplug_conformance import nonfinite

        for name, (model, feeds, formula) in nonfinite.cases().items():
            cases.append({"name": f"nonfinite/{name}", "model": model.SerializeToString(),
                          "kind": "nonfinite", "datasets": [(feeds, None)], "formula": formula})
    if only in (None, "nodes"):
        from nnplug_conformance import node_tests

        for c in node_tests.collect():
            model = c.load_model()
            inits = {t.name for t in model.graph.initializer}
            names = [i.name for i in model.graph.input if i.name not in inits]
            outs = [o.name for o in model.graph.output]
            sets = []
            for ins, expected in c.datasets():
                if any(x is None for x in (*ins, *expected)):
                    sets = None  # sequences / optionals: nnplug networks take tensors only
                    break
                sets.append((dict(zip(names, ins)), dict(zip(outs, expected))))
            if sets:
                cases.append({"name": f"node/{c.name}", "model": model.SerializeToString(),
                              "kind": "node", "ops": c.op_types, "rtol": c.rtol, "atol": c.atol,
                              "datasets": sets})
    return cases[:limit] if limit else cases


def add_references(cases: list[dict]) -> None:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1

    def ort_run(model, feeds):
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"]).run(None, feeds)

    for case in cases:
        if case.get("formula"):  # onnxruntime's answer depends on its kernel here
            case["references"] = [{"y": case["formula"](case["datasets"][0][0], ort_run)}]
            continue
        refs = []
        try:
            sess = ort.InferenceSession(case["model"], so, providers=["CPUExecutionProvider"])
            names = [o.name for o in sess.get_outputs()]
            for feeds, _ in case["datasets"]:
                refs.append(dict(zip(names, sess.run(None, feeds))))
        except Exception as e:  # noqa: BLE001 - onnxruntime declines the model
            refs = None
            case["ort_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        case["references"] = refs


# -- one setting (child) ------------------------------------------------------------------------
def compare_case(case: dict, got: dict, k: int) -> str | None:
    """None when nnplug's outputs of data set ``k`` match a reference, else the difference."""
    from nnplug_conformance import node_tests, nonfinite

    if case["kind"] == "nonfinite":  # the reference: onnxruntime's answer, or the op's formula
        try:
            nonfinite.assert_nonfinite_match(got["y"], case["references"][k]["y"], case["name"])
        except AssertionError as e:
            return str(e).splitlines()[0]
        return None

    refs = []
    if case.get("references"):
        refs.append(("onnxruntime", case["references"][k]))
    if case["datasets"][k][1] is not None:
        refs.append(("onnx expected", case["datasets"][k][1]))
    if not refs:
        return None
    problems = []
    for label, ref in refs:
        diffs = []
        for name, want in ref.items():
            want = np.asarray(want)
            have = got.get(name)
            if have is None:
                diffs.append(f"output {name!r} missing")
                continue
            if case["kind"] == "node":
                rtol, atol = node_tests.tolerance(case["ops"], case["rtol"], case["atol"])
            else:
                rtol, atol = 0.0, MODEL_RTOL * max(float(np.nanmax(np.abs(want))), 1e-30) \
                    if want.size and want.dtype.kind == "f" else 0.0
            d = node_tests.compare(name, np.asarray(have), want, rtol, atol)
            if d:
                diffs.append(d)
        if not diffs:
            return None
        problems.append(f"vs {label}: " + "; ".join(diffs))
    return " | ".join(problems)


def run_setting(ref_file: str, backends: list[str], threads: int, out_file: str) -> None:
    """Rebuild the cases (deterministic: same seeds) and run them; only the references
    travel from the parent, so the random-weight models are not copied between processes."""
    import nnplug

    with open(ref_file, "rb") as f:
        only, limit, refs = pickle.load(f)
    cases = collect_cases(only, limit)
    for case in cases:
        case["references"] = refs.get(case["name"])
    rt = proofcases.runtime(backends)
    for info in rt.backends.values():
        setter = getattr(info.backend, "set_num_threads", None)
        if setter is not None:
            try:
                setter(threads)
            except NotImplementedError:
                pass
    results = []
    warnings.simplefilter("ignore")
    for case in cases:
        for backend in backends:
            rec = {"case": case["name"], "backend": backend}
            t0 = time.perf_counter()
            try:
                with rt.load(case["model"], backends=[backend]) as net:
                    wrong = None
                    for k, (feeds, _) in enumerate(case["datasets"]):
                        with np.errstate(all="ignore"):
                            got = net.run(feeds)
                        wrong = compare_case(case, got, k)
                        if wrong:
                            break
                rec["result"] = "wrong" if wrong else "matched"
                if wrong:
                    rec["detail"] = wrong[:600]
            except nnplug.NnplugError as e:
                rec["result"] = "declined"
                rec["detail"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            except Exception as e:  # noqa: BLE001 - not one of nnplug's errors: a bug
                rec["result"] = "crashed"
                rec["detail"] = f"{type(e).__name__}: {str(e)[:300]}"
            rec["seconds"] = round(time.perf_counter() - t0, 3)
            results.append(rec)
    rt.close()
    with open(out_file, "w") as f:
        json.dump(results, f)


# -- driver -----------------------------------------------------------------------------------
def settings_from(args) -> tuple[list[tuple[str, int, str]], list[str]]:
    """(coretype, threads, isa) triples; isa "best" leaves NNPLUG_CPU_ISA unset."""
    notes = []
    if args.settings:
        pairs = []
        for item in args.settings.split(","):
            parts = item.split(":")
            pairs.append((parts[0], int(parts[1]), parts[2] if len(parts) > 2 else "best"))
    else:
        pairs = [(c, t, "best") for c in CORETYPES for t in THREADS]
        if proofcases.cpu_has("avx512f"):
            pairs.append(("unset", 2, "avx2"))
        pairs.append(("unset", 1, "portable"))
    if any(c == "SkylakeX" for c, _, _ in pairs) and not proofcases.cpu_has("avx512f"):
        pairs = [(c, t, i) for c, t, i in pairs if c != "SkylakeX"]
        notes.append("OPENBLAS_CORETYPE=SkylakeX skipped: this CPU has no avx512f, and "
                     "OpenBLAS's SkylakeX kernels would fault with SIGILL on it")
    return pairs, notes


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", help="comma-separated backend ids (default: every installed "
                   "one; opencl only where a device is visible)")
    p.add_argument("--settings", help="comma-separated CORETYPE:THREADS[:ISA], e.g. "
                   "unset:1,Haswell:2,unset:2:avx2 (ISA: best, avx2 or portable, for NNPLUG_CPU_ISA)")
    p.add_argument("--only", choices=["zoo", "nodes", "nonfinite"],
                   help="only whole models, node cases or the non-finite cases")
    p.add_argument("--limit", type=int, help="first N cases (for a quick look)")
    p.add_argument("--report", help="write every result as JSON here")
    p.add_argument("--child", nargs=4, metavar=("REFS", "BACKENDS", "THREADS", "OUT"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        cases, backends, threads, out = args.child
        run_setting(cases, backends.split(","), int(threads), out)
        return 0

    notes = []
    if args.backends:
        backends = args.backends.split(",")
    else:
        backends = sorted(proofcases.backend_entry_points())
        if "opencl" in backends and not proofcases.opencl_available():
            backends.remove("opencl")
            notes.append("backend opencl skipped: no OpenCL device visible")
    pairs, more = settings_from(args)
    notes += more
    load = os.getloadavg()
    print(f"differential: backends {', '.join(backends)}; settings "
          f"{', '.join(f'{c}:{t}:{i}' for c, t, i in pairs)}; load average {load[0]:.2f}", flush=True)
    for n in notes:
        print(f"  note: {n}")
    t0 = time.perf_counter()
    cases = collect_cases(args.only, args.limit)
    add_references(cases)
    no_ref = sum(1 for c in cases if not c["references"])
    print(f"  {len(cases)} cases, references in {time.perf_counter() - t0:.0f} s "
          f"(onnxruntime declined {no_ref}; those use ONNX's expected outputs where there are "
          f"any)", flush=True)
    failed = False
    everything = []
    with tempfile.TemporaryDirectory(prefix="nnplug-differential-") as tmp:
        case_file = os.path.join(tmp, "references.pkl")
        with open(case_file, "wb") as f:
            pickle.dump((args.only, args.limit, {c["name"]: c["references"] for c in cases}), f)
        del cases
        for coretype, threads, isa in pairs:
            env = dict(os.environ)
            env.pop("OPENBLAS_CORETYPE", None)
            env.pop("NNPLUG_CPU_ISA", None)
            if coretype != "unset":
                env["OPENBLAS_CORETYPE"] = coretype
            if isa != "best":
                env["NNPLUG_CPU_ISA"] = isa
            out = os.path.join(tmp, f"{coretype}-{threads}-{isa}.json")
            t1 = time.perf_counter()
            try:
                proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--child",
                                       case_file, ",".join(backends), str(threads), out],
                                      env=env, timeout=CHILD_TIMEOUT_S)
                rc = proc.returncode
            except subprocess.TimeoutExpired:
                rc = "timeout"
            label = f"OPENBLAS_CORETYPE={coretype} threads={threads}" + (
                f" NNPLUG_CPU_ISA={isa}" if isa != "best" else "")
            if rc != 0 or not os.path.exists(out):
                print(f"  {label}: the child process failed ({rc}); see its output above")
                failed = True
                continue
            with open(out) as f:
                results = json.load(f)
            for r in results:
                r["setting"] = label
            everything += results
            failed |= summarize(label, results, time.perf_counter() - t1)
    if args.report:
        with open(args.report, "w") as f:
            json.dump({"notes": notes, "results": everything}, f, indent=1)
    print("differential: FAILED (wrong answers or crashes above)" if failed else
          "differential: no wrong answer")
    return 1 if failed else 0


def summarize(label: str, results: list[dict], seconds: float) -> bool:
    bad = False
    for backend in sorted({r["backend"] for r in results}):
        mine = [r for r in results if r["backend"] == backend]
        counts = {k: sum(1 for r in mine if r["result"] == k)
                  for k in ("matched", "declined", "wrong", "crashed")}
        print(f"  {label} [{backend}]: " + ", ".join(f"{v} {k}" for k, v in counts.items())
              + f" ({seconds:.0f} s, load {os.getloadavg()[0]:.2f})", flush=True)
        for r in mine:
            if r["result"] in ("wrong", "crashed"):
                bad = True
                print(f"    {r['result'].upper()} {r['case']}: {r.get('detail', '')}")
    return bad


if __name__ == "__main__":
    sys.exit(main())
