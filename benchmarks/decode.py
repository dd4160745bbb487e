"""Autoregressive decoding (greedy, batch 1) of decoders exported with their KV cache, on
nnplug's backend orders beside onnxruntime and OpenVINO (CPU, same thread count), in one process.

    python benchmarks/export_decoders.py [FOLDER]     # once, in an environment with torch
    python benchmarks/decode.py [FOLDER] [--models gpt2,llama,...] [--orders cpu,onednn+cpu,opencl+cpu]
                                [--threads 2] [--rounds 5] [--new-tokens 32] [--tiny]
                                [--last-logits] [--no-openvino]

FOLDER (default ~/.cache/nnplug-bench/decoders) holds gpt2_kv.onnx, llama_kv.onnx and their
larger sizes (gpt2_m_kv.onnx ... llama_l_kv.onnx: hidden 256 / 512 / 768, 2 / 4 / 6 layers);
--models defaults to those found there. --tiny takes the tiny test decoders shipped in
nnplug.demo instead. Every engine decodes the same
16-token prompt (seeded) for --new-tokens tokens with nnplug.generation's loop: onnxruntime
through plain runs, nnplug through its sessions (IO binding where a backend keeps the caches off
the host), OpenVINO's CPU plugin (when installed) through one infer request, in f32
(openvino-f32) and at its default precision (openvino). Each timed decode's tokens are compared with onnxruntime's; an engine that differs,
or cannot load a model, is reported and not timed on it. The decodes of the engines are
interleaved as in benchmarks/zoo.py (a pause, untimed decodes, then a timed one, engine after
engine, for --rounds rounds), and the script prints per model and engine the median prompt time
(ms), the median time per new token (ms), its ratio to onnxruntime's, and the load average
beside every figure: figures taken under load are not results. Needs nnplug, onnxruntime and
the backends named; OpenVINO optional.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_decoders import FAMILIES, MODELS  # noqa: E402 - the decoders it writes
from zoo import QUIET_S, SETTLE_S, openvino_engines, print_summary  # noqa: E402 - the zoo benchmark's pacing

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench", "decoders")
TINY_DIR = os.path.join(ROOT, "packages", "core", "src", "nnplug", "demo")
PROMPT_LENGTH = 16


def decode(decoder, prompt: np.ndarray, new_tokens: int) -> tuple[float, float, list[int]]:
    """(prompt seconds, mean seconds per new token, the tokens) of one greedy decode."""
    t0 = time.perf_counter()
    logits = decoder.start(prompt)
    t1 = time.perf_counter()
    tokens = [int(logits[0].argmax())]
    for _ in range(new_tokens - 1):
        logits = decoder.step(tokens[-1:])
        tokens.append(int(logits[0].argmax()))
    steps = max(new_tokens - 1, 1)
    return t1 - t0, (time.perf_counter() - t1) / steps, tokens


class OpenVinoSession:
    """What nnplug.generation's Decoder needs of a session (get_inputs, get_outputs, run) over
    OpenVINO's CPU plugin; ``like``, an onnxruntime session of the same model, describes the
    inputs and outputs. Outputs are copies (infer's default), so the presents fed back as the
    next step's pasts are never overwritten by it."""

    def __init__(self, core, path, like, config: dict):
        self._like = like
        self._compiled = core.compile_model(core.read_model(path), "CPU", config)
        self._request = self._compiled.create_infer_request()
        self._names = [o.get_any_name() for o in self._compiled.outputs]

    def get_inputs(self):
        return self._like.get_inputs()

    def get_outputs(self):
        return self._like.get_outputs()

    def run(self, names, feeds):
        res = self._request.infer(feeds).to_tuple()
        by_name = dict(zip(self._names, res))
        return [by_name[n] for n in names]


def time_engines(decoders: dict, prompt, new_tokens: int, rounds: int, want: list[int]) -> dict:
    """Interleaved: per round, each engine pauses (QUIET_S), decodes untimed for SETTLE_S, then
    once timed. {engine: (median prompt ms, median ms per token)}; an engine whose tokens
    differ from ``want`` in any decode is dropped with a message."""
    times = {name: ([], []) for name in decoders}
    live = dict(decoders)
    for _ in range(rounds):
        for name, dec in list(live.items()):
            time.sleep(QUIET_S)
            start = time.perf_counter()
            while time.perf_counter() - start < SETTLE_S:
                decode(dec, prompt, 4)
            first, per_token, tokens = decode(dec, prompt, new_tokens)
            if tokens != want:
                print(f"  {name}: tokens differ from onnxruntime's ({tokens} vs {want}); not "
                      f"timed", file=sys.stderr)
                del live[name]
                continue
            times[name][0].append(first)
            times[name][1].append(per_token)
    return {name: (statistics.median(p) * 1e3, statistics.median(t) * 1e3)
            for name, (p, t) in times.items() if name in live}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", help=f"exported decoders (default {DEFAULT_DIR})")
    ap.add_argument("--models", help=f"default: those of {','.join(MODELS)} exported "
                                     f"(with --tiny: {','.join(FAMILIES)})")
    ap.add_argument("--orders", default="cpu,onednn+cpu,opencl+cpu",
                    help="nnplug backend orders, '+'-joined (those not installed are skipped)")
    ap.add_argument("--threads", type=int, default=2, help="intra-op threads of every engine")
    ap.add_argument("--rounds", type=int, default=5, help="timed decodes per engine and model")
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--tiny", action="store_true", help="the tiny decoders of nnplug.demo")
    ap.add_argument("--no-openvino", action="store_true", help="leave OpenVINO out")
    ap.add_argument("--last-logits", action="store_true",
                    help="every engine runs the model from nnplug.generation.last_position_logits "
                         "(logits of the last position only)")
    args = ap.parse_args(argv)
    folder = args.folder or (TINY_DIR if args.tiny else DEFAULT_DIR)
    suffix = "_kv_tiny.onnx" if args.tiny else "_kv.onnx"
    models = args.models.split(",") if args.models else [
        m for m in MODELS if m in FAMILIES or os.path.isfile(os.path.join(folder, m + suffix))]

    import onnxruntime as ort

    import nnplug
    from nnplug.generation import Decoder, last_position_logits

    rt = nnplug.Runtime()
    orders = [o.split("+") for o in args.orders.split(",") if o]
    for o in [o for o in orders if not all(b in rt.backends for b in o)]:
        print(f"backend order {'+'.join(o)} is not available (installed: "
              f"{', '.join(rt.backends)}); skipping it", file=sys.stderr)
    orders = [o for o in orders if all(b in rt.backends for b in o)]
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    nso = nnplug.SessionOptions()
    nso.intra_op_num_threads = args.threads
    core, vino = openvino_engines(args.threads) if not args.no_openvino else (None, {})
    scratch = tempfile.TemporaryDirectory(prefix="nnplug-decode-")

    print(f"threads={args.threads} rounds={args.rounds} prompt={PROMPT_LENGTH} tokens "
          f"new={args.new_tokens} tokens folder={folder}")
    print(f"{'model':<10}{'engine':<24}{'prompt ms':>11}{'ms/token':>10}{'ratio':>8}"
          f"{'io_binding':>12}{'load':>8}")
    ratios: dict[str, list[float]] = {}
    for name in [m for m in models if m]:
        path = os.path.join(folder, name + suffix)
        if not os.path.isfile(path):
            print(f"no {path}: export it first (python benchmarks/export_decoders.py"
                  f"{' --tiny' if args.tiny else ''})", file=sys.stderr)
            return 1
        if args.last_logits:  # the same model for every engine, in a file OpenVINO reads too
            import onnx

            path_sliced = os.path.join(scratch.name, f"{name}_last.onnx")
            onnx.save(last_position_logits(onnx.load(path)), path_sliced)
            path = path_sliced
        sessions = {"onnxruntime": ort.InferenceSession(path, so,
                                                        providers=["CPUExecutionProvider"])}
        for order in orders:
            try:
                sessions[f"nnplug-{'+'.join(order)}"] = nnplug.InferenceSession(
                    path, nso, providers=order, runtime=rt)
            except nnplug.NnplugError as e:
                print(f"  {name}: nnplug-{'+'.join(order)} cannot load it: {e}", file=sys.stderr)
        for engine, config in vino.items():
            try:
                sessions[engine] = OpenVinoSession(core, path, sessions["onnxruntime"], config)
            except Exception as e:  # noqa: BLE001 - a figure we cannot get is shown as such
                print(f"  {name}: {engine} cannot load it: {e}", file=sys.stderr)
        decoders = {k: Decoder(s) for k, s in sessions.items()}
        vocab = decoders["onnxruntime"].layout.vocab or 500  # the tiny decoders have 256 ids
        prompt = np.random.default_rng(0).integers(2, min(500, vocab), (1, PROMPT_LENGTH))
        want = decode(decoders["onnxruntime"], prompt, args.new_tokens)[2]
        med = time_engines(decoders, prompt, args.new_tokens, args.rounds, want)
        base = med["onnxruntime"][1]
        for engine, (first, per_token) in med.items():
            ratio = per_token / base
            if engine != "onnxruntime":
                ratios.setdefault(engine, []).append(ratio)
            # the 1-minute load average beside every figure: a figure taken under load is none
            print(f"{name:<10}{engine:<24}{first:>11.2f}{per_token:>10.2f}{ratio:>8.2f}"
                  f"{'yes' if decoders[engine].io_binding else 'no':>12}"
                  f"{os.getloadavg()[0]:>8.2f}", flush=True)
        for s in sessions.values():
            if hasattr(s, "close"):
                s.close()
    print(f"tokens: every engine printed matched onnxruntime's {args.new_tokens} greedy tokens "
          f"on every timed decode")
    print_summary(ratios)
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
