"""The ``nnplug`` command: info, run, profile, generate, demo, doctor, new, and commands added by
packages.

A package adds a subcommand with an entry point in the ``nnplug.cli`` group: the name is the
command, the value a callable ``main(argv: list[str]) -> int`` that gets the arguments after
the command's name (like ``doctor`` and ``new``). Built-in commands win over a package's
command of the same name; ``NNPLUG_DISABLE_PLUGINS`` skips one by name.

Errors exit with status 1 (2 for usage) and one clear line on stderr, no traceback;
``NNPLUG_DEBUG=1`` shows the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

from . import __version__, discovery
from .errors import NnplugError, PluginError

BUILTIN_COMMANDS = ("info", "run", "generate", "demo", "doctor", "new")


def _runtime(args):
    from .runtime import CreationOptions, Runtime

    path = discovery.absolute_paths(getattr(args, "backend_path", None))
    return Runtime(CreationOptions(dynamic_backends_path=path))


def cmd_info(args) -> int:
    rt = _runtime(args)
    print(f"nnplug {__version__} ({os.path.dirname(__file__)})")
    print("backends:")
    for info in rt.backends.values():
        version = f" {info.version}" if info.version else ""
        print(f"  {info.id:<12} {info.device_type:<8} {info.origin}{version}: {info.source}")
    if not rt.backends:
        print(f"  none installed; install one: pip install {discovery.BACKEND_DIST_PREFIX}<id>")
    print("custom ops:")
    for op in rt.ops.values():
        print(f"  {op.op_type:<12} {', '.join(op.targets):<8} {op.source}"
              f"{' (overrides ONNX op)' if op.override else ''}")
    if not rt.ops:
        print("  none")
    if rt.disabled:
        print(f"disabled: {', '.join(rt.disabled)}")
    if rt.load_errors:
        print("load errors:")
        for e in rt.load_errors:
            print(f"  {e}")
    rt.close()
    return 0


def _parse_feed(text: str):
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise NnplugError(f"--input {text!r}: write it as NAME=FILE.npy")
    if not os.path.exists(path):
        raise NnplugError(f"--input {name}: file {path!r} does not exist")
    try:
        return name, np.load(path, allow_pickle=False)
    except Exception as e:
        raise NnplugError(f"--input {name}: {path!r} is not a .npy file: {e}") from None


def random_feeds(inputs, seed: int = 0, dims: dict | None = None) -> dict:
    """Random inputs for a network: symbolic/unknown dims become 1 (or ``dims[name]``)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in inputs:
        shape = [d if isinstance(d, int) else (dims or {}).get(d, 1) for d in (v.shape or ())]
        dtype = v.dtype or np.dtype(np.float32)
        if dtype.kind == "f":
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[v.name] = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[v.name] = rng.integers(0, 2, shape).astype(bool)
        else:
            raise NnplugError(f"input {v.name!r}: cannot make random data of dtype {dtype}")
    return feeds


def _summary(name: str, arr: np.ndarray) -> str:
    text = f"  {name}: shape {list(arr.shape)} dtype {arr.dtype}"
    if arr.size and arr.dtype.kind in "fiub":
        flat = arr.reshape(-1)
        text += f" min {flat.min():.6g} max {flat.max():.6g} mean {flat.astype(np.float64).mean():.6g}"
        if arr.ndim >= 1 and arr.shape[-1] > 1 and arr.dtype.kind == "f":
            top = np.argsort(flat[-arr.shape[-1]:])[::-1][:5]
            text += f" top5 {top.tolist()}"
    return text


def run_model(rt, model: str, backends, feeds=None, repeat: int = 1,
              show_placement: bool = False, profile: str | None = None,
              output_dir: str | None = None) -> int:
    """Load ``model`` on ``rt``, run it ``repeat`` times, print a summary; with ``profile``,
    write a Chrome trace of the runs there; with ``output_dir``, save each output as
    ``<name>.npy`` there."""
    from .profiling import Profiler, profiled

    if repeat < 1:
        raise NnplugError(f"--repeat must be at least 1, got {repeat}")

    prof = Profiler() if profile else None
    with rt.load(model, backends=backends or None) as net:
        feeds = feeds if feeds else random_feeds(net.inputs)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            out = profiled(net, feeds, prof) if prof else net.run(feeds)
            times.append(time.perf_counter() - t0)
        print(f"model {model}")
        print("inputs:")
        for k, v in feeds.items():
            print(_summary(k, np.asarray(v)))
        print("outputs:")
        for k, v in out.items():
            print(_summary(k, v))
        counts: dict[str, int] = {}
        for b in net.assignment.values():
            counts[b] = counts.get(b, 0) + 1
        print("nodes ran on: " + ", ".join(f"{b} ({n})" for b, n in sorted(counts.items())))
        if show_placement:
            print("placement:")
            for line in net.explain_placement().splitlines():
                print(f"  {line}")
        print(f"time: {min(times) * 1e3:.2f} ms (best of {len(times)})")
        if output_dir:
            print(f"saved: {', '.join(save_outputs(out, output_dir))}")
    if prof is not None:
        print(f"profile: {prof.write(profile)} (open it in https://ui.perfetto.dev or "
              f"chrome://tracing)")
    return 0


def save_outputs(outputs: dict, folder: str) -> list[str]:
    """Each output as ``<folder>/<name>.npy`` (names made safe for a file name); the paths."""
    os.makedirs(folder, exist_ok=True)
    paths = []
    for name, value in outputs.items():
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "output"
        path = os.path.join(folder, f"{safe}.npy")
        np.save(path, np.asarray(value), allow_pickle=False)
        paths.append(path)
    return paths


def cmd_profile(args) -> int:
    """Run a model a few times with profiling; print time per op type, chart it."""
    from .profiling import Profiler, by_op_type, format_table, profiled, write_chart

    if args.runs < 1 or args.warmup < 0:
        raise NnplugError("--runs must be >= 1 and --warmup >= 0")
    feeds = dict(_parse_feed(t) for t in args.input or [])
    rt = _runtime(args)
    try:
        with rt.load(args.model, backends=args.backend or None,
                     optimization=args.optimization) as net:
            feeds = feeds or random_feeds(net.inputs)
            for _ in range(args.warmup):
                net.run(feeds)
            prof = Profiler()
            for _ in range(args.runs):
                profiled(net, feeds, prof)
    finally:
        rt.close()
    rows = by_op_type(prof)
    runs = [e for e in prof.events() if e["cat"] == "run"]
    per_run = sum(e["dur"] for e in runs) / len(runs) / 1e3
    print(f"model {args.model}: {per_run:.3f} ms per run (mean of {len(runs)}, after "
          f"{args.warmup} warm-up), load average {_load_average()}")
    print(format_table(rows, runs=len(runs)))
    if args.trace:
        print(f"trace: {prof.write(args.trace)}")
    chart = args.chart or os.path.splitext(os.path.basename(args.model))[0] + "-profile.svg"
    print(f"chart: {write_chart(rows, chart, title=f'{os.path.basename(args.model)}: time per op type', runs=len(runs))}")
    return 0


def _load_average() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


def cmd_run(args) -> int:
    feeds = dict(_parse_feed(t) for t in args.input or [])
    rt = _runtime(args)
    try:
        return run_model(rt, args.model, args.backend, feeds, args.repeat, args.placement,
                         args.profile, args.output_dir)
    finally:
        rt.close()


def _token_ids(text: str) -> list[int]:
    try:
        ids = [int(t) for t in text.replace(" ", "").split(",") if t != ""]
    except ValueError:
        ids = []
    if not ids:
        raise argparse.ArgumentTypeError(f"{text!r}: give comma-separated token ids, e.g. 1,2,3")
    return ids


def cmd_generate(args) -> int:
    """Decode with a model in optimum's KV-cache layout; the new token ids on one line."""
    from .errors import InvalidArgumentError
    from .generation import generate
    from .session import InferenceSession, SessionOptions

    sampling = {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}
    given = [f"--{k.replace('_', '-')}" for k, v in {**sampling, "seed": args.seed}.items()
             if v is not None]
    if given and not args.sample:
        raise InvalidArgumentError(f"{', '.join(given)} choose how tokens are sampled: add "
                                   f"--sample (without it the most likely token is taken)")
    so = SessionOptions()
    so.intra_op_num_threads = args.threads
    rt = _runtime(args)
    try:
        with InferenceSession(_last_logits_model(args.model), so, providers=args.backend,
                              runtime=rt) as sess:
            tokens = generate(sess, args.prompt, args.max_new_tokens, do_sample=args.sample,
                              eos_token_id=args.eos, seed=args.seed, **sampling)
        print(",".join(str(t) for t in tokens.tolist()))
        return 0
    finally:
        rt.close()


def _last_logits_model(path: str):
    """The decoder at ``path`` with logits of the last position only (all the loop reads: the
    prompt then skips projecting the other positions), or ``path`` itself when it has no
    final projection to slice (the session reads it and says what is wrong, if anything)."""
    import onnx

    from .generation import last_position_logits

    try:
        return last_position_logits(onnx.load(path))
    except Exception:  # noqa: BLE001 - the session reads the file again and words the problem
        return path


def cmd_demo(args) -> int:
    """Recognise the bundled digit images with the best installed backend, checked against
    onnxruntime's logits."""
    rt = _runtime(args)
    try:
        if not rt.backends:
            print("nnplug demo: no backend is installed, so nothing can run the model.\n"
                  f"Install one and try again:  pip install {discovery.BACKEND_DIST_PREFIX}<id> "
                  f"(the README names nnplug's own)", file=sys.stderr)
            for e in rt.load_errors:
                print(f"  (load error: {e})", file=sys.stderr)
            return 1
        from . import demo

        print(f"nnplug {__version__}: demo inference, a CNN that recognises handwritten digits "
              f"({demo.MODEL})")
        print(f"backends available: {', '.join(rt.backends)}")
        with rt.load(demo.MODEL, backends=args.backend) as net:
            feeds = demo.demo_input()
            times = []
            for _ in range(5):
                t0 = time.perf_counter()
                out = net.run(feeds)
                times.append(time.perf_counter() - t0)
            ran = sorted(set(b.replace(" (folded)", "") for b in net.assignment.values()))
            print(f"ran {len(net.assignment)} nodes on: {', '.join(ran)}")
        result = demo.check(out[demo.OUTPUT_NAME])
        labels = demo.true_labels()
        print(f"{len(labels)} held-out 8x8 images, true digit -> recognised digit (* = wrong):")
        pairs = [f"{t}->{p}{'*' if t != p else ''}".ljust(5)
                 for t, p in zip(labels, result.predicted)]
        for i in range(0, len(pairs), 8):
            print((f"  {i:2d}-{min(i + 8, len(pairs)) - 1:2d}:  " + "  ".join(pairs[i:i + 8]))
                  .rstrip())
        right = int((result.predicted == labels).sum())
        print(f"accuracy: {right}/{len(labels)} ({100.0 * right / len(labels):.1f}%)")
        print(f"time: {min(times) * 1e3:.2f} ms for the batch of {len(labels)} (best of 5 runs)")
        differ = [i for i, (a, b) in enumerate(zip(result.predicted, result.expected_predicted))
                  if a != b]
        print(f"max abs difference from onnxruntime's logits: {result.max_abs_diff:.3g} "
              f"(tolerance {result.tolerance:.3g}); recognised digits "
              + ("equal onnxruntime's" if not differ else
                 f"differ from onnxruntime's at sample(s) {differ}")
              + f" -> {'OK' if result.ok else 'MISMATCH'}")
        return 0 if result.ok else 1
    finally:
        rt.close()


def cmd_doctor(argv) -> int:
    from .doctor import doctor_main

    return doctor_main(argv)


def cmd_new(argv) -> int:
    from .scaffold import new_main

    return new_main(argv)


def plugin_commands() -> dict:
    """Installed ``nnplug.cli`` entry points by command name (metadata only, nothing imported)."""
    disabled = discovery.disabled_names()
    return {ep.name: ep for ep in discovery.entry_points(discovery.CLI_GROUP)
            if ep.name not in BUILTIN_COMMANDS and ep.name not in disabled}


def cmd_plugin(ep, argv) -> int:
    from .plugin_import import EntryPointImportError, load_entry_point

    try:
        fn = load_entry_point(ep)
    except EntryPointImportError as e:
        raise PluginError(f"command {ep.name!r} ({discovery.describe(ep)}) failed to load: "
                          f"{e}") from None
    return fn(list(argv))


def build_parser(commands: dict | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nnplug", description="nnplug: plugin-based ONNX inference")
    p.add_argument("--version", action="version", version=f"nnplug {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    info = sub.add_parser("info", help="version, backends and ops with their source, load errors")
    info.add_argument("--backend-path", help="native backend folders (':'-separated)")
    info.set_defaults(func=cmd_info)

    run = sub.add_parser("run", help="run a model on random or given inputs")
    run.add_argument("model", help="path of an .onnx model")
    run.add_argument("--backend", action="append", help="backend id, in preference order (repeatable)")
    run.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    run.add_argument("--repeat", type=int, default=1, help="run this many times, report the best time")
    run.add_argument("--placement", action="store_true", help="print the backend of every node")
    run.add_argument("--profile", metavar="TRACE.json",
                     help="write a Chrome trace of the runs (Perfetto, chrome://tracing)")
    run.add_argument("--backend-path", help="native backend folders (':'-separated)")
    run.add_argument("--output-dir", metavar="DIR",
                     help="save every output as DIR/<name>.npy (np.load reads it back)")
    run.set_defaults(func=cmd_run)

    prof = sub.add_parser("profile", help="time per op type of a model, as a table and a chart")
    prof.add_argument("model", help="path of an .onnx model")
    prof.add_argument("--backend", action="append", help="backend id, in preference order (repeatable)")
    prof.add_argument("--input", action="append", metavar="NAME=FILE.npy", help="an input from a .npy file")
    prof.add_argument("--runs", type=int, default=10, help="profiled runs (default 10)")
    prof.add_argument("--warmup", type=int, default=1, help="unprofiled runs first (default 1)")
    prof.add_argument("--optimization", choices=["disable", "basic", "all"], default="all",
                      help="graph optimisation level (default all)")
    prof.add_argument("--chart", metavar="FILE.svg|FILE.png",
                      help="where to write the chart (default MODEL-profile.svg here; .png "
                           "needs matplotlib: pip install 'nnplug[chart]')")
    prof.add_argument("--trace", metavar="TRACE.json", help="also write the Chrome trace")
    prof.add_argument("--backend-path", help="native backend folders (':'-separated)")
    prof.set_defaults(func=cmd_profile)

    gen = sub.add_parser("generate", help="decode with a model exported with its KV cache "
                                          "(optimum's layout); prints the new token ids")
    gen.add_argument("model", help="path of an .onnx decoder (docs/decoding.md)")
    gen.add_argument("--prompt", type=_token_ids, required=True, metavar="IDS",
                     help="the prompt's token ids, comma-separated: 1,2,3")
    gen.add_argument("--max-new-tokens", type=int, default=32, help="at most this many (default 32)")
    gen.add_argument("--eos", type=_token_ids, metavar="IDS",
                     help="stop token id(s), comma-separated: generation ends after one")
    gen.add_argument("--sample", action="store_true", help="sample instead of taking the most "
                                                           "likely token")
    gen.add_argument("--temperature", type=float, help="with --sample (default 1)")
    gen.add_argument("--top-k", type=int, help="with --sample: keep the k most likely tokens "
                                               "(default: all)")
    gen.add_argument("--top-p", type=float, help="with --sample: keep the most likely tokens up "
                                                 "to this mass (default 1: all)")
    gen.add_argument("--seed", type=int, help="with --sample: the same seed gives the same tokens")
    gen.add_argument("--backend", action="append", help="backend id, in preference order (repeatable)")
    gen.add_argument("--threads", type=int, default=0, help="intra-op threads (default 0: the "
                                                            "backends' own)")
    gen.add_argument("--backend-path", help="native backend folders (':'-separated)")
    gen.set_defaults(func=cmd_generate)

    demo = sub.add_parser("demo", help="recognise bundled digit images, checked against onnxruntime")
    demo.add_argument("--backend", action="append", help="backend id, in preference order")
    demo.set_defaults(func=cmd_demo)

    sub.add_parser("doctor", help="check native backend folders (and a model): nnplug doctor --help",
                   add_help=False)
    sub.add_parser("new", help="scaffold a backend or op package: nnplug new --help", add_help=False)
    for name, ep in (plugin_commands() if commands is None else commands).items():
        dist = getattr(ep, "dist", None)
        sub.add_parser(name, add_help=False,
                       help=f"from {dist.name if dist else ep.value}: nnplug {name} --help")
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv and argv[0] == "doctor":
            return cmd_doctor(argv[1:])
        if argv and argv[0] == "new":
            return cmd_new(argv[1:])
        commands = plugin_commands()
        if argv and argv[0] in commands:
            return cmd_plugin(commands[argv[0]], argv[1:])
        parser = build_parser(commands)
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help()
            return 2
        return args.func(args)
    except (NnplugError, OSError) as e:
        if os.environ.get("NNPLUG_DEBUG"):
            raise
        print(f"nnplug: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug or a plugin's own error: still one line, no traceback
        if os.environ.get("NNPLUG_DEBUG"):
            raise
        print(f"nnplug: error: {type(e).__name__}: {e} (set NNPLUG_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
