"""Latency of the onnx package's model zoo (batch 1) on nnplug's cpu backend, beside
onnxruntime (CPU, same thread count), OpenVINO (CPU plugin, when installed) and
onnx.reference, in one process.

    python benchmarks/zoo.py [--threads 2] [--runs 20] [--models resnet50,vgg19]
                             [--backends onednn,opencl] [--no-reference] [--busy 1]
                             [--precision bf16] [--fp16] [--measure]

Also timed: ``nnplug-default``, an ``nnplug.InferenceSession`` given no providers (the
default backend order the installed backends declare: it should match the fastest order), and,
with ``pip install openvino``, ``openvino-f32`` (INFERENCE_PRECISION_HINT=f32) and
``openvino`` (its default precision: bf16 on CPUs with AMX).

Prints per-model medians (ms), the ratio nnplug-cpu / onnxruntime, and the geometric mean of
the ratios. Backends named with --backends are timed too, with their own geometric mean
against onnxruntime; an entry may be a preference list joined by "+" (``opencl+cpu``), and
``onednn``, which declines what it does not run by design, means ``onednn+cpu``. The
timed runs of each engine are interleaved (a few runs of one, then of the next) so machine
noise hits all of them alike. --busy N starts N processes that each keep a core busy for the
whole run: how each engine copes with other work beside it (a spinning thread pool gives way
badly); those figures are taken under load by design and compare engines' slowdowns, they are
not the engines' speeds. Needs nnplug, nnplug-backend-cpu and onnxruntime installed.

--measure adds ``nnplug-measure``: the same session from a Runtime created with
``placement="measure"`` (partitions two host backends run are timed at load and kept on the
faster; see docs/performance.md).

Reduced precision: --precision bf16 adds ``nnplug-onednn+cpu@bf16``, a session with the
precision hint (config entry ``nnplug.precision``), and prints beside each model how far it
and OpenVINO's default are from onnxruntime's float32 answer (largest difference over the
output's largest magnitude). --fp16 times every engine on the model as onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)`` writes it (pip install onnxconverter-common)
instead of the float32 model.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx

ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet",
          "squeezenet", "vgg19", "zfnet512"]


def feeds_of(model: onnx.ModelProto, seed: int = 0) -> dict:
    inits = {i.name for i in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        if inp.name in inits:
            continue
        shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = rng.random(shape, dtype=np.float32)
    return feeds


def as_float16(model: onnx.ModelProto, name: str, folder: str) -> tuple[onnx.ModelProto, str]:
    """The model as convert_float_to_float16(keep_io_types=True) writes it, and a file of it
    in ``folder`` (OpenVINO reads a path)."""
    from onnxconverter_common.float16 import convert_float_to_float16

    # the zoo's weights are graph inputs too (IR 3), which the converter would keep float32:
    # at IR 4 they need not be, and the ones no node reads go
    model = onnx.ModelProto.FromString(model.SerializeToString())
    read = {x for n in model.graph.node for x in n.input}
    inits = [t for t in model.graph.initializer if t.name in read]
    kept = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    del model.graph.input[:], model.graph.initializer[:]
    model.graph.input.extend(kept)
    model.graph.initializer.extend(inits)
    model.ir_version = max(model.ir_version, 4)
    fp16 = convert_float_to_float16(model, keep_io_types=True)
    path = os.path.join(folder, f"{name}_fp16.onnx")
    onnx.save(fp16, path)
    return fp16, path


def logits_of(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without a final Softmax: random weights saturate it (outputs 0 and 1 that
    every precision gets right), so distances are taken on its input."""
    last = model.graph.node[-1]
    if last.op_type != "Softmax":
        return model
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(model).graph.value_info}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.node[-1]
    del out.graph.output[:]
    out.graph.output.append(inferred[last.input[0]])
    return out


def hinted_run(rt, engine: str):
    """run(path, feeds) -> first output, for an ``providers@precision`` engine."""
    import nnplug

    providers, precision = engine.split("@")

    def run(path, feeds):
        so = nnplug.SessionOptions()
        so.add_session_config_entry("nnplug.precision", precision)
        return nnplug.InferenceSession(path, so, providers.split("+"), runtime=rt).run(None, feeds)[0]

    return run


def openvino_engines(threads: int) -> tuple[object, dict]:
    """(OpenVINO's Core, {engine name: compile config}), or (None, {}) when it is not
    installed: its CPU plugin in f32 (INFERENCE_PRECISION_HINT) and at its default precision
    (bf16 on CPUs with AVX512-BF16 or AMX, whose answers may then differ from onnxruntime's:
    each benchmark says how it treats that), both on ``threads`` threads."""
    try:
        import openvino as ov
    except ImportError:
        print("openvino is not installed (pip install openvino): its columns or rows are left out",
              file=sys.stderr)
        return None, {}
    return ov.Core(), {"openvino-f32": {"INFERENCE_PRECISION_HINT": "f32",
                                        "INFERENCE_NUM_THREADS": threads},
                       "openvino": {"INFERENCE_NUM_THREADS": threads}}


def openvino_run(core):
    """run(path, feeds) -> first output, on OpenVINO's CPU plugin at its default precision."""
    def run(path, feeds):
        return core.compile_model(core.read_model(path), "CPU").create_infer_request().infer(
            feeds).to_tuple()[0]

    return run


def distances(model: onnx.ModelProto, feeds: dict, engines: dict) -> str:
    """How far each reduced-precision engine is from onnxruntime on the model's logits: the
    largest difference over the largest magnitude. ``engines``: label -> a function of a
    model file's path and the feeds giving the first output."""
    import onnxruntime as ort

    path = os.path.join(tempfile.mkdtemp(prefix="nnplug-zoo-"), "logits.onnx")
    onnx.save(logits_of(model), path)
    so = ort.SessionOptions()
    so.log_severity_level = 3
    want = np.asarray(ort.InferenceSession(path, so).run(None, feeds)[0], np.float64)
    scale = max(float(np.abs(want).max()), 1e-30)
    said = []
    for label, make in engines.items():
        got = np.asarray(make(path, feeds), np.float64)
        said.append(f"{label} {float(np.abs(got - want).max()) / scale:.1e}")
    os.remove(path)
    os.rmdir(os.path.dirname(path))
    return "logits' distance from onnxruntime f32 / their range: " + ", ".join(said)


def print_summary(ratios: dict[str, list[float]]) -> None:
    """The geometric mean of each engine's ratios to onnxruntime, then the load average."""
    for engine, rs in ratios.items():
        if rs:
            geo = math.exp(sum(math.log(r) for r in rs) / len(rs))
            print(f"geometric mean of {engine} / onnxruntime: {geo:.2f} over {len(rs)} models")
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"figures taken under load are not results")


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@contextlib.contextmanager
def busy_processes(n: int):
    """n processes, each keeping one core busy until the block ends (--busy)."""
    ctx = multiprocessing.get_context("spawn")  # not a fork of a process running thread pools
    stop = ctx.Event()
    procs = [ctx.Process(target=_spin, args=(stop,), daemon=True) for _ in range(n)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        stop.set()
        for p in procs:
            p.join()


QUIET_S = 0.2
"""Pause before each engine's turn in a round (see time_rounds)."""
SETTLE_S = 0.3
"""Untimed runs, for at least this long, after the pause."""


def time_rounds(runners: dict, rounds: int, per_round: int, *, pause: float = QUIET_S,
                settle: float = SETTLE_S) -> dict:
    """Interleaved timing: each round gives every engine a turn of `per_round` timed runs,
    after a pause and untimed runs. onnxruntime's worker threads spin for tens of milliseconds
    after a run; on a machine with as many cores as threads they take a core from the engine
    timed next (measured here: a 2-thread nnplug-cpu MobileNetV3 took 26-28 ms right after
    onnxruntime, 14-15 ms after a 0.1 s pause), so each turn starts once the engine before has
    gone quiet. After an idle spell these virtual machines run slower for about 0.1 s (every
    engine, onnxruntime at 1 thread included: 15-16 ms, then 12-13), so the untimed runs go on
    for SETTLE_S before the timed ones. With ``settle=0`` and one run a round, what is timed
    is one request at a time, as a server sees them: each the first run after ``pause`` (long
    enough for every engine's threads to go to sleep)."""
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, fn in runners.items():
            time.sleep(pause)
            start = time.perf_counter()
            while time.perf_counter() - start < settle:  # at least one run when settling
                fn()
            for _ in range(per_round):
                t = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="threads for nnplug-cpu and onnxruntime")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per engine and model")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--backends", default="", help="other nnplug backends to time, e.g. opencl")
    ap.add_argument("--no-reference", action="store_true", help="skip onnx.reference")
    ap.add_argument("--busy", type=int, default=0, help="processes keeping a core busy meanwhile")
    ap.add_argument("--precision", default="", help="also time onednn+cpu with this hint (bf16)")
    ap.add_argument("--fp16", action="store_true", help="time the models converted to float16")
    ap.add_argument("--measure", action="store_true",
                    help="also time the default order with placement=\"measure\"")
    args = ap.parse_args(argv)

    os.environ["NNPLUG_CPU_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import nnplug

    rt = nnplug.Runtime()
    if "cpu" not in rt.backends:
        print("nnplug-backend-cpu is not installed (pip install packages/backend-cpu)", file=sys.stderr)
        for err in rt.load_errors:
            print(f"  {err}", file=sys.stderr)
        return 1
    extra = ["onednn+cpu" if b == "onednn" else b for b in args.backends.split(",") if b]
    for b in extra:
        for one in b.split("+"):
            if one not in rt.backends:
                print(f"backend {one!r} is not available; skipping {b}", file=sys.stderr)
    extra = [b for b in extra if all(one in rt.backends for one in b.split("+"))]
    extra += ["default"]  # a session with no providers: the declared default order
    measured_rt = None
    if args.measure:  # partitions two backends run, timed at load and kept on the faster
        measured_rt = nnplug.Runtime(nnplug.CreationOptions(placement="measure"))
        extra.append("measure")
    if args.precision and all(b in rt.backends for b in ("onednn", "cpu")):
        extra.append(f"onednn+cpu@{args.precision}")  # the hint, as a session gives it
    extra_ratios = {b: [] for b in extra}
    core, vino = openvino_engines(args.threads)
    extra += list(vino)
    extra_ratios.update({v: [] for v in vino})
    nso = nnplug.SessionOptions()
    nso.intra_op_num_threads = args.threads

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3

    cols = ["nnplug-cpu", "onnxruntime", "ratio"] + [
        b if b in vino else f"nnplug-{b}" for b in extra] + ["onnx.reference"]
    print(f"threads={args.threads} runs={args.runs} busy={args.busy} cpu={rt.backends['cpu'].source}")
    widths = [max(16, len(c) + 2) for c in cols]
    print(f"{'model':<14}" + "".join(f"{c:>{w}}" for c, w in zip(cols, widths)) + f"{'load':>8}")
    ratios = []
    scratch = tempfile.TemporaryDirectory(prefix="nnplug-zoo-")  # --fp16: the converted models
    for name in [m for m in args.models.split(",") if m]:
        path = os.path.join(ZOO, f"light_{name}.onnx")
        model = onnx.load(path)
        feeds = feeds_of(model)
        if args.fp16:
            model, path = as_float16(model, name, scratch.name)
        net = rt.load(model, backends=["cpu"])
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        runners = {"nnplug-cpu": lambda net=net, feeds=feeds: net.run(feeds),
                   "onnxruntime": lambda sess=sess, feeds=feeds: sess.run(None, feeds)}
        others = {}
        for b in extra:
            try:
                if b in vino:
                    compiled = core.compile_model(
                        core.read_model(path), "CPU",
                        {**vino[b], "INFERENCE_NUM_THREADS": args.threads})
                    request = compiled.create_infer_request()
                    runners[b] = lambda r=request, feeds=feeds: r.infer(feeds)
                    continue
                if b == "default":
                    others[b] = nnplug.InferenceSession(model, nso, runtime=rt).network
                elif b == "measure":
                    others[b] = nnplug.InferenceSession(model, nso, runtime=measured_rt).network
                elif "@" in b:
                    providers, precision = b.split("@")
                    hinted = nnplug.SessionOptions()
                    hinted.intra_op_num_threads = args.threads
                    hinted.add_session_config_entry("nnplug.precision", precision)
                    others[b] = nnplug.InferenceSession(model, hinted, providers.split("+"),
                                                        runtime=rt).network
                else:
                    others[b] = rt.load(model, backends=b.split("+"))
                runners[f"nnplug-{b}"] = lambda n=others[b], feeds=feeds: n.run(feeds)
            except Exception as e:  # noqa: BLE001 - a figure we cannot get is shown as such
                print(f"  {name}: {b} cannot run it: {e}", file=sys.stderr)
        for fn in runners.values():  # warm up (first-run allocations, lazy init)
            fn()
        if args.precision:
            engines = {f"nnplug-{b}": hinted_run(rt, b) for b in extra if "@" in b}
            if "openvino" in vino:
                engines["openvino"] = openvino_run(core)
            print(f"  {name}: {distances(model, feeds, engines)}", flush=True)
        per_round = 2
        with busy_processes(args.busy):
            med = time_rounds(runners, max(1, args.runs // per_round), per_round)
        ratio = med["nnplug-cpu"] / med["onnxruntime"]
        ratios.append(ratio)
        label = {b: b if b in vino else f"nnplug-{b}" for b in extra}
        for b in extra:
            if label[b] in med:
                extra_ratios[b].append(med[label[b]] / med["onnxruntime"])
        row = [f"{med['nnplug-cpu']:.2f}", f"{med['onnxruntime']:.2f}", f"{ratio:.2f}"]
        row += [f"{med[label[b]]:.2f}" if label[b] in med else "-" for b in extra]
        if args.no_reference:
            row.append("-")
        else:
            from onnx.reference import ReferenceEvaluator

            ref = ReferenceEvaluator(model)
            t = time.perf_counter()
            ref.run(None, feeds)  # one run is enough: it is orders of magnitude slower
            row.append(f"{(time.perf_counter() - t) * 1e3:.0f}")
        # the 1-minute load average beside every figure: a ratio taken under load is no result
        print(f"{name:<14}" + "".join(f"{c:>{w}}" for c, w in zip(row, widths))
              + f"{os.getloadavg()[0]:>8.2f}",
              flush=True)
        net.close()
        for n in others.values():
            n.close()
    print_summary({"nnplug-cpu": ratios, **{b if b in vino else f"nnplug-{b}": rs
                                             for b, rs in extra_ratios.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
