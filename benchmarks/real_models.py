"""Latency of full-size real models (batch 1) on nnplug's cpu backend beside onnxruntime and
OpenVINO (CPU, same thread count), in one process.

    python benchmarks/export_real_models.py [FOLDER]      # once, in an environment with torch
    python benchmarks/real_models.py [FOLDER] [--threads 2] [--runs 10]
                                     [--models resnet18,bert_base] [--backends onednn]
                                     [--busy 1] [--no-openvino] [--measure]
                                     [--precision bf16] [--isolated 0.1]

FOLDER (default ~/.cache/nnplug-bench) holds the exported models and their manifest.json.
Before any timing, every engine's outputs on the same seeded inputs are checked against
onnxruntime's (within 1e-4 relative to the output's largest magnitude); an engine that does
not match, or cannot run a model, is reported and not timed on it. Then the runs of each engine
are interleaved as in benchmarks/zoo.py, and the script prints per-model medians (ms), the ratio
nnplug-cpu / onnxruntime (and of each --backends entry), the geometric means of the ratios,
and the load average beside every figure. --busy N keeps N cores busy meanwhile, as in
benchmarks/zoo.py. OpenVINO's CPU plugin (when installed: pip install openvino) is timed in
float32 (openvino-f32, checked like nnplug) and at its default precision (openvino: bfloat16
on CPUs with AVX512-BF16 or AMX, so its distance from onnxruntime is printed, not checked).
The manifest gives each model its family (export_real_models.FAMILIES); the script ends with
each engine's worst ratio per family beside the geometric means. --measure adds
``nnplug-measure``: onednn+cpu (cpu alone where oneDNN is not installed) from a Runtime with
``placement="measure"`` (partitions and then the whole network timed at load on the host
backends that run them, kept on the faster; decisions in $NNPLUG_CACHE_DIR). --precision bf16
adds ``nnplug-onednn+cpu@bf16``, a session with the precision hint (config entry
``nnplug.precision``): like OpenVINO's default, its distance from onnxruntime's float32 is
printed, not checked. --isolated SECONDS times requests one at a time instead, as a server
sees them: before each timed run every engine waits that long (its threads go to sleep) and
runs no untimed run. Needs nnplug, nnplug-backend-cpu and onnxruntime.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import busy_processes, openvino_engines, print_summary, time_rounds  # noqa: E402 - the zoo benchmark's timing and summary

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench")
RTOL = 1e-4


def make_inputs(spec: list[dict], seed: int) -> dict[str, np.ndarray]:
    """Seeded inputs from the manifest: "normal" floats, "ids:N" integers below N, "ones"."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for s in spec:
        shape, kind = s["shape"], s["kind"]
        if kind.startswith("ids:"):
            a = rng.integers(0, int(kind[4:]), shape)
        elif kind == "ones":
            a = np.ones(shape)
        else:
            a = rng.standard_normal(shape)
        feeds[s["name"]] = a.astype(np.dtype(s["dtype"]))
    return feeds


def mismatch(got: dict, want: dict) -> str | None:
    """None when every output is within RTOL of onnxruntime's (relative to its largest
    magnitude), else what differs."""
    for name, w in want.items():
        g = got.get(name)
        if g is None or g.shape != w.shape:
            return f"output {name!r}: {None if g is None else g.shape} vs {w.shape}"
        scale = max(float(np.nanmax(np.abs(w))) if w.size else 1.0, 1e-30)
        err = float(np.nanmax(np.abs(g.astype(np.float64) - w))) / scale if w.size else 0.0
        if not err <= RTOL:
            return f"output {name!r}: largest difference {err:.2e} of its largest magnitude"
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT_DIR, help="exported models and manifest.json")
    ap.add_argument("--threads", type=int, default=2, help="threads for nnplug-cpu and onnxruntime")
    ap.add_argument("--runs", type=int, default=10, help="timed runs per engine and model")
    ap.add_argument("--models", default="", help="comma-separated names (default: all in the manifest)")
    ap.add_argument("--backends", default="", help="other nnplug backends to time, e.g. onednn")
    ap.add_argument("--busy", type=int, default=0, help="processes keeping a core busy meanwhile")
    ap.add_argument("--no-openvino", action="store_true", help="leave OpenVINO's columns out")
    ap.add_argument("--precision", default="", help="also time onednn+cpu with this hint (bf16)")
    ap.add_argument("--isolated", type=float, default=0.0, metavar="SECONDS",
                    help="time single requests, each after this pause (no untimed runs)")
    ap.add_argument("--measure", action="store_true",
                    help="also time onednn+cpu with placement=\"measure\"")
    args = ap.parse_args(argv)

    mpath = os.path.join(args.folder, "manifest.json")
    if not os.path.isfile(mpath):
        print(f"no {mpath}: export the models first (python benchmarks/export_real_models.py "
              f"{args.folder})", file=sys.stderr)
        return 1
    with open(mpath) as f:
        manifest = json.load(f)
    names = [m for m in args.models.split(",") if m] or sorted(manifest)
    unknown = [m for m in names if m not in manifest]
    if unknown:
        print(f"not in {mpath}: {', '.join(unknown)}", file=sys.stderr)
        return 1

    os.environ["NNPLUG_CPU_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import nnplug

    rt = nnplug.Runtime()
    if "cpu" not in rt.backends:
        print("nnplug-backend-cpu is not installed (pip install packages/backend-cpu)", file=sys.stderr)
        return 1
    extra = ["onednn+cpu" if b == "onednn" else b for b in args.backends.split(",") if b]
    for b in [b for b in extra if not all(one in rt.backends for one in b.split("+"))]:
        print(f"backend {b!r} is not available; skipping it", file=sys.stderr)
    extra = [b for b in extra if all(one in rt.backends for one in b.split("+"))]
    measured_rt = None
    if args.measure:  # partitions, then the whole network, timed at load: the faster kept
        measured_rt = nnplug.Runtime(nnplug.CreationOptions(placement="measure"))
        extra.append("measure")
    if args.precision and all(b in rt.backends for b in ("onednn", "cpu")):
        extra.append(f"onednn+cpu@{args.precision}")  # the hint, as a session gives it
    engines = ["cpu"] + extra
    core, vino = (None, {}) if args.no_openvino else openvino_engines(args.threads)
    ratios = {b: [] for b in engines + list(vino)}
    families = {}  # engine -> family -> ratios

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3

    others = extra + list(vino)
    label = {b: b if b in vino else f"nnplug-{b}" for b in ["cpu", *others]}
    cols = ["nnplug-cpu", "onnxruntime", "ratio"] + [label[b] for b in others] + \
        [f"ratio-{b}" for b in others]
    widths = [max(13, len(c) + 2) for c in cols]
    print(f"threads={args.threads} runs={args.runs} busy={args.busy} "
          f"{f'isolated={args.isolated}s ' if args.isolated else ''}folder={args.folder}")
    print(f"{'model':<20}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'load':>8}")
    for name in names:
        entry = manifest[name]
        path = os.path.join(args.folder, entry["file"])
        feeds = make_inputs(entry["inputs"], seed=sum(map(ord, name)))
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        want = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        runners = {"onnxruntime": lambda sess=sess, feeds=feeds: sess.run(None, feeds)}
        nets = []
        for b in engines:
            try:
                if b == "measure":
                    net = measured_rt.load(path, backends=[
                        x for x in ("onednn", "cpu") if x in measured_rt.backends])
                elif "@" in b:
                    providers, precision = b.split("@")
                    net = rt.load(path, backends=providers.split("+"), targets={
                        "onednn": {"kind": "onednn", "precision": precision}})
                else:
                    net = rt.load(path, backends=b.split("+"))
            except nnplug.NnplugError as e:
                print(f"  {name}: nnplug-{b} cannot load it: {e}", file=sys.stderr)
                continue
            nets.append(net)
            bad = mismatch(net.run(feeds), want)
            if bad and "@" in b:  # reduced precision: said, not checked (as OpenVINO's default)
                print(f"  {name}: nnplug-{b} differs from onnxruntime's float32: {bad}",
                      file=sys.stderr)
            elif bad:
                print(f"  {name}: nnplug-{b} does not match onnxruntime ({bad}); not timed", file=sys.stderr)
                continue
            runners[f"nnplug-{b}"] = lambda net=net, feeds=feeds: net.run(feeds)
        for v, config in vino.items():
            try:
                request = core.compile_model(core.read_model(path), "CPU",
                                             config).create_infer_request()
                got = request.infer(feeds)
            except Exception as e:  # noqa: BLE001 - an engine that cannot run it is reported
                print(f"  {name}: {v} cannot run it: {type(e).__name__}: {e}", file=sys.stderr)
                continue
            # float32 is checked like nnplug; the default precision (bf16 here) is reported,
            # not checked: it is not meant to agree to 1e-4
            # by position: OpenVINO may name an output by another of its tensor's names
            bad = mismatch(dict(zip(want, (np.asarray(t) for t in got.values()))), want)
            if bad and v == "openvino-f32":
                print(f"  {name}: {v} does not match onnxruntime ({bad}); not timed", file=sys.stderr)
                continue
            if bad:
                print(f"  {name}: {v} differs from onnxruntime's float32: {bad}", file=sys.stderr)
            runners[v] = lambda r=request, feeds=feeds: r.infer(feeds)
        for fn in runners.values():  # warm up (first-run allocations, lazy init)
            fn()
        per_round = 2
        with busy_processes(args.busy):
            med = (time_rounds(runners, args.runs, 1, pause=args.isolated, settle=0)
                   if args.isolated else
                   time_rounds(runners, max(1, args.runs // per_round), per_round))
        row = [f"{med['nnplug-cpu']:.2f}" if "nnplug-cpu" in med else "-", f"{med['onnxruntime']:.2f}"]
        rs = {}
        for b in ratios:
            if label[b] in med:
                rs[b] = med[label[b]] / med["onnxruntime"]
                ratios[b].append(rs[b])
                families.setdefault(b, {}).setdefault(entry.get("family", "other"), []).append(
                    (rs[b], name))
        row.append(f"{rs['cpu']:.2f}" if "cpu" in rs else "-")
        row += [f"{med[label[b]]:.2f}" if label[b] in med else "-" for b in others]
        row += [f"{rs[b]:.2f}" if b in rs else "-" for b in others]
        # the 1-minute load average beside every figure: a ratio taken under load is no result
        print(f"{name:<20}" + "".join(f"{c:>{w}}" for c, w in zip(row, widths)) + f"{os.getloadavg()[0]:>8.2f}",
              flush=True)
        for net in nets:
            net.close()
        del sess
    # the done-when of a broad set: no family far above onnxruntime, not only a good mean
    for b, fams in families.items():
        worst = ", ".join(f"{f} {max(rs)[0]:.2f} ({max(rs)[1]})" for f, rs in sorted(fams.items()))
        print(f"worst ratio per family, {label[b]}: {worst}")
    print_summary({label[b]: rs for b, rs in ratios.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
