"""Latency of quantized models (onnxruntime's own quantization tools, random weights) on nnplug
beside onnxruntime (CPU, same thread count), in one process.

    python packages/backend-onednn/tests/models/make_quantized_models.py --full FOLDER  # once,
                                                        # in an environment with torch
    python benchmarks/quantized_models.py [FOLDER] [--threads 2] [--runs 10] [--engines onednn,cpu]

FOLDER (default ~/.cache/nnplug-bench/quantized) holds the .onnx files: dynamic-int8 BERT
(quantize_dynamic: MatMulInteger) and QDQ MobileNetV2 (quantize_static, QDQ format). Every
engine's outputs on the same seeded inputs are first checked against onnxruntime's: within
QTOL of the largest output magnitude (the integer products are exact, the float ops around them
round differently, and a value that lands on a rounding boundary of a QuantizeLinear or a
DynamicQuantizeLinear can take the next integer: one quantization step). An engine that does not
match is reported and not timed. Engines are "onednn" (nnplug-backend-onednn first, then
nnplug-backend-cpu) and "cpu" (nnplug-backend-cpu alone). Runs of each engine are interleaved
with a settling pause as in benchmarks/zoo.py; the script prints per-model medians (ms), each
engine's ratio to onnxruntime and the load average beside every figure.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import print_summary, time_rounds  # noqa: E402 - the zoo benchmark's timing and summary

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench", "quantized")
QTOL = 2e-2


def feeds_for(sess, seed: int) -> dict:
    """Seeded inputs: token ids below 1000 and an all-ones mask for int64 inputs, else normal."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        if i.type == "tensor(int64)":
            feeds[i.name] = (np.ones(shape) if "mask" in i.name else
                             rng.integers(0, 1000, shape)).astype(np.int64)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def mismatch(got: dict, want: dict) -> str | None:
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape:
            return f"output {name!r}: {None if g is None else g.shape} vs {w.shape}"
        scale = max(float(np.abs(w).max()) if w.size else 1.0, 1e-30)
        err = float(np.abs(g.astype(np.float64) - w).max()) / scale if w.size else 0.0
        if not err <= QTOL:
            return f"output {name!r}: {err:.2e} of its range"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT_DIR, help="the quantized .onnx files")
    ap.add_argument("--threads", type=int, default=2, help="threads for nnplug and onnxruntime")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per engine and model")
    ap.add_argument("--engines", default="onednn", help="comma-separated: onednn, cpu")
    args = ap.parse_args(argv)
    files = sorted(f for f in os.listdir(args.folder) if f.endswith(".onnx")) \
        if os.path.isdir(args.folder) else []
    if not files:
        print(f"no .onnx in {args.folder}: make them first (python packages/backend-onednn/tests/"
              f"models/make_quantized_models.py --full {args.folder})", file=sys.stderr)
        return 1

    os.environ["NNPLUG_CPU_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import nnplug

    rt = nnplug.Runtime()
    engines = {"onednn": ["onednn", "cpu"], "cpu": ["cpu"]}
    wanted = [e for e in args.engines.split(",") if e]
    for e in wanted:
        if e not in engines or not all(b in rt.backends for b in engines[e]):
            print(f"engine {e!r} is not available", file=sys.stderr)
            return 1
    ratios = {e: [] for e in wanted}
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3

    cols = ["onnxruntime"] + [f"nnplug-{e}" for e in wanted] + [f"ratio-{e}" for e in wanted]
    widths = [max(13, len(c) + 2) for c in cols]
    print(f"threads={args.threads} runs={args.runs} folder={args.folder}")
    print(f"{'model':<28}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'load':>8}")
    for file in files:
        name, path = file[:-5], os.path.join(args.folder, file)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        feeds = feeds_for(sess, seed=sum(map(ord, name)))
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        runners = {"onnxruntime": lambda sess=sess, feeds=feeds: sess.run(None, feeds)}
        nets = []
        for e in wanted:
            try:
                net = rt.load(path, backends=engines[e])
            except nnplug.NnplugError as err:
                print(f"  {name}: nnplug-{e} cannot load it: {err}", file=sys.stderr)
                continue
            nets.append(net)
            bad = mismatch(net.run(feeds), want)
            if bad:
                print(f"  {name}: nnplug-{e} does not match onnxruntime ({bad}); not timed",
                      file=sys.stderr)
                continue
            runners[f"nnplug-{e}"] = lambda net=net, feeds=feeds: net.run(feeds)
        for fn in runners.values():  # warm up (first-run allocations, lazy init)
            fn()
        per_round = 2
        med = time_rounds(runners, max(1, args.runs // per_round), per_round)
        row = [f"{med['onnxruntime']:.2f}"]
        row += [f"{med[f'nnplug-{e}']:.2f}" if f"nnplug-{e}" in med else "-" for e in wanted]
        for e in wanted:
            if f"nnplug-{e}" in med:
                ratios[e].append(med[f"nnplug-{e}"] / med["onnxruntime"])
                row.append(f"{ratios[e][-1]:.2f}")
            else:
                row.append("-")
        # the 1-minute load average beside every figure: a ratio taken under load is no result
        print(f"{name:<28}" + "".join(f"{c:>{w}}" for c, w in zip(row, widths))
              + f"{os.getloadavg()[0]:>8.2f}", flush=True)
        for net in nets:
            net.close()
        del sess
    print_summary({f"nnplug-{e}": rs for e, rs in ratios.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
