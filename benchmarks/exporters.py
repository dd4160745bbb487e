"""The TorchScript and the dynamo export of the same models side by side: nnplug (default
backends, and the cpu backend alone) beside onnxruntime, min of interleaved runs.

    python benchmarks/export_real_models.py FOLDER --models bert_l4 [--dynamo]   # with torch
    python benchmarks/export_decoders.py FOLDER/decoders --models gpt2,llama [--dynamo]
    python benchmarks/exporters.py FOLDER [--models bert_l4,gpt2,llama] [--threads 2]
                                   [--rounds 15] [--cpu-time]

Cases: bert_l4 at sequence 128; the decoders decoding one token after 32 cached (s1p32) and a
16-token prompt (s16p0). Every engine's outputs are first checked against onnxruntime's (within
1e-4 of the largest magnitude). --cpu-time takes the process's CPU time instead of the wall
clock: steadier on a loaded machine at --threads 1. Prints the load average beside each line;
figures taken under load are indications, not results.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import onnxruntime as ort

import nnplug

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "nnplug-bench")


def bert_feeds():
    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, 30522, (1, 128)).astype(np.int64),
            "attention_mask": np.ones((1, 128), np.int64)}


def decoder_feeds(vocab, kv_heads, head_dim, positions, seq, past):
    rng = np.random.default_rng(0)
    f = {"input_ids": rng.integers(2, vocab, (1, seq)).astype(np.int64),
         "attention_mask": np.ones((1, past + seq), np.int64)}
    if positions:
        f["position_ids"] = np.arange(past, past + seq, dtype=np.int64)[None]
    for i in range(2):
        for kv in ("key", "value"):
            f[f"past_key_values.{i}.{kv}"] = rng.standard_normal((1, kv_heads, past, head_dim)).astype(np.float32)
    return f


CASES = [("bert_l4", "bert_l4.onnx", bert_feeds)] + [
    (f"{m} {tag}", f"decoders/{m}_kv.onnx",
     lambda a=args, s=s, p=p: decoder_feeds(*a, s, p))
    for m, args in (("gpt2", (50257, 4, 64, False)), ("llama", (32000, 2, 32, True)))
    for tag, s, p in (("s1p32", 1, 32), ("s16p0", 16, 0))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=DEFAULT_DIR)
    ap.add_argument("--models", default="bert_l4,gpt2,llama")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--cpu-time", action="store_true", help="process CPU time, not the wall clock")
    args = ap.parse_args(argv)
    clock = time.process_time if args.cpu_time else time.perf_counter
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = args.threads, 1
    no = nnplug.SessionOptions()
    no.intra_op_num_threads = args.threads
    print(f"threads {args.threads}, {clock.__name__}, load {os.getloadavg()}")
    wanted = args.models.split(",")
    for label, rel, make in CASES:
        if label.split()[0] not in wanted:
            continue
        feeds = make()
        for kind in ("torchscript", "dynamo"):
            path = os.path.join(args.folder, os.path.dirname(rel), *(["dynamo"] if kind == "dynamo" else []),
                                os.path.basename(rel))
            if not os.path.isfile(path):
                print(f"{label} {kind}: no {path}", file=sys.stderr)
                continue
            engines = {"ort": ort.InferenceSession(path, so, providers=["CPUExecutionProvider"]),
                       "nnplug": nnplug.InferenceSession(path, no),
                       "nnplug-cpu": nnplug.InferenceSession(path, no, providers=["cpu"])}
            want = engines["ort"].run(None, feeds)
            for name, s in engines.items():
                for g, w in zip(s.run(None, feeds), want):
                    err = np.abs(g - w).max() / max(np.abs(w).max(), 1e-30)
                    if not err <= 1e-4:
                        print(f"{label} {kind}: {name} differs from onnxruntime ({err:.2e})", file=sys.stderr)
                        return 1
            best = dict.fromkeys(engines, float("inf"))
            for _ in range(args.rounds):
                for name, s in engines.items():
                    t = clock()
                    s.run(None, feeds)
                    best[name] = min(best[name], clock() - t)
            r = best["ort"]
            print(f"{label:12s} {kind:11s} ort {r * 1e3:7.2f} ms  nnplug {best['nnplug'] * 1e3:7.2f} ms "
                  f"{best['nnplug'] / r:5.2f}x  cpu {best['nnplug-cpu'] * 1e3:7.2f} ms "
                  f"{best['nnplug-cpu'] / r:5.2f}x  load {os.getloadavg()[0]:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
