"""Pass / declined / wrong counts of one backend over the whole of ONNX's node test suite.

    python tools/node_suite_counts.py [--backend cpu] [--library lib.so] [--json detail.json]

``--library`` measures that native backend library alone (an isolated Runtime that loads no
installed plugin), for example an older build to compare with.

Every case of ``onnx.backend.test.case.node.collect_testcases(None)`` (``_expanded`` ones
included, nothing selected by what the backend supports): loaded with ``backends=[NAME]``;
*declined* when nnplug raises UnsupportedNodeError (no backend runs a node), *pass* when every
output of every data set matches the case's expected outputs (same dtype and shape; rtol 1e-3
and atol 1e-5 or the case's own tolerance when looser; integers, bools and strings exactly;
NaN where NaN is expected), *wrong* otherwise, *load_error* / *run_error* for any other error.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import warnings

import numpy as np
import onnx
import onnx.backend.test.case.node as cases
from onnx import numpy_helper

import nnplug


def _array(x):
    return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x


def _same(got, want, rtol, atol):
    if isinstance(want, list):
        return (isinstance(got, list) and len(got) == len(want)
                and all(_same(g, w, rtol, atol) for g, w in zip(got, want)))
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return False
    if want.dtype.kind in "biuUSO":
        return np.array_equal(got, want)
    return np.allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                       equal_nan=True)


def run_case(rt, backend, case):
    try:
        net = rt.load(case.model, backends=[backend])
    except nnplug.UnsupportedNodeError as e:
        m = re.search(r"\(op (\w+)", str(e))
        return "declined", m.group(1) if m else "?"
    except Exception as e:  # noqa: BLE001 - every other failure is counted, not raised
        return "load_error", f"{type(e).__name__}: {str(e)[:300]}"
    rtol, atol = max(case.rtol, 1e-3), max(case.atol, 1e-5)
    inits = {t.name for t in case.model.graph.initializer}
    inputs = [i for i in case.model.graph.input if i.name not in inits]
    try:
        for ins, outs in case.data_sets:
            got = net.run({i.name: _array(v) for i, v in zip(inputs, ins)})
            got = [got[o.name] for o in net.outputs]
            if len(got) != len(outs) or not all(_same(g, _array(w), rtol, atol)
                                                for g, w in zip(got, outs)):
                return "wrong", ""
        return "pass", ""
    except Exception as e:  # noqa: BLE001
        return "run_error", f"{type(e).__name__}: {str(e)[:300]}"
    finally:
        net.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--library", help="a native backend library to measure instead of the installed one")
    ap.add_argument("--json", help="write each case's result to this file")
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            found = [c for c in cases.collect_testcases(None) if c.model is not None]
    counts, declined, detail = collections.Counter(), collections.Counter(), {}
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated()) if args.library else nnplug.Runtime()
    if args.library:
        rt.register_backend(args.library)
    with rt:
        for case in found:
            result, why = run_case(rt, args.backend, case)
            counts[result] += 1
            detail[case.name] = f"{result} {why}".strip()
            if result == "declined":
                declined[why] += 1
    print(f"{len(found)} cases on {args.backend}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print("first declined op (cases):", ", ".join(f"{k} {v}" for k, v in declined.most_common(25)))
    for name, d in detail.items():
        if d.startswith(("wrong", "load_error", "run_error")):
            print(" ", name, d)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(detail, f, indent=0)
    return 1 if counts["wrong"] or counts["load_error"] or counts["run_error"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
