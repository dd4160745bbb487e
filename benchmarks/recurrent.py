"""Latency of one LSTM, GRU or RNN node over a sequence, at several batch sizes, on nnplug's cpu
backend beside onnxruntime and OpenVINO (CPU, same thread count), in one process.

    python benchmarks/recurrent.py [--threads 2] [--rounds 5] [--batches 1,5,16,64]
                                   [--ops LSTM,GRU,RNN] [--seq 100] [--hidden 256]

Each model is one node with a constant W, R and B (random, R scaled so that the recurrence
neither blows up nor dies out), over --seq steps of 256 features, batch-first inputs of each
--batches size, as a recurrent layer of a tagger or a speech model runs when requests are
batched. Every engine's output is checked against onnxruntime's first (within 1e-4 of its
largest magnitude; OpenVINO's default precision, bfloat16 on CPUs with AVX512-BF16 or AMX, is
printed with its distance instead). Runs are interleaved as in benchmarks/zoo.py; the script
prints medians (ms), each ratio to onnxruntime, their geometric means and the load average.
Needs nnplug, nnplug-backend-cpu and onnxruntime.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo import openvino_engines, print_summary, time_rounds  # noqa: E402 - the zoo benchmark's timing and summary

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
FEATURES = 256
RTOL = 1e-4


def model(op: str, seq: int, batch: int, hidden: int):
    rng = np.random.default_rng(0)
    g = GATES[op]
    w = rng.uniform(-0.2, 0.2, (1, g * hidden, FEATURES)).astype(np.float32)
    r = (rng.uniform(-1.5, 1.5, (1, g * hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = rng.uniform(-0.3, 0.3, (1, 2 * g * hidden)).astype(np.float32)
    node = helper.make_node(op, ["x", "w", "r", "b"], ["y"], hidden_size=hidden)
    graph = helper.make_graph(
        [node], f"{op.lower()}_b{batch}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, batch, FEATURES])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [seq, 1, batch, hidden])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(r, "r"),
         numpy_helper.from_array(b, "b")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x = rng.standard_normal((seq, batch, FEATURES)).astype(np.float32)
    return m, {"x": x}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--per-round", type=int, default=3)
    ap.add_argument("--batches", default="1,5,16,64")
    ap.add_argument("--ops", default="LSTM,GRU,RNN")
    ap.add_argument("--seq", type=int, default=100)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--no-openvino", action="store_true")
    args = ap.parse_args(argv)
    os.environ["NNPLUG_CPU_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import nnplug

    core, vino = (None, {}) if args.no_openvino else openvino_engines(args.threads)
    print(f"threads={args.threads} rounds={args.rounds}x{args.per_round} seq={args.seq} "
          f"hidden={args.hidden} features={FEATURES}; load average {os.getloadavg()[0]:.2f}")
    names = ["onnxruntime", "nnplug-cpu", *vino]
    print(f"{'model':<12}" + "".join(f"{n:>16}" for n in names) +
          "".join(f"{n + ' / ort':>22}" for n in names[1:]) + f"{'load':>7}")
    ratios: dict[str, list[float]] = {n: [] for n in names[1:]}
    for op in args.ops.split(","):
        for batch in map(int, args.batches.split(",")):
            m, feeds = model(op, args.seq, batch, args.hidden)
            data = m.SerializeToString()
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
            nso = nnplug.SessionOptions()
            nso.intra_op_num_threads = args.threads
            sess = nnplug.InferenceSession(data, nso, providers=["cpu"])
            want = ref.run(None, feeds)[0]
            runners = {"onnxruntime": lambda r=ref, f=feeds: r.run(None, f),
                       "nnplug-cpu": lambda s=sess, f=feeds: s.run(None, f)}
            notes = []
            for name, config in vino.items():
                req = core.compile_model(core.read_model(data, b""), "CPU", config)
                req = req.create_infer_request()
                runners[name] = lambda q=req, f=feeds: q.infer(f)
            scale = float(np.abs(want).max()) or 1.0
            for name, fn in list(runners.items())[1:]:
                got = fn()
                got = got[0] if isinstance(got, list) else got.to_tuple()[0]
                dist = float(np.abs(np.asarray(got) - want).max()) / scale
                if name == "openvino":  # its default precision: how far, not whether
                    notes.append(f"openvino {dist:.1e} from onnxruntime")
                elif dist > RTOL:
                    print(f"  {op} batch {batch}: {name} differs from onnxruntime by {dist:.2e} "
                          f"of the output's largest magnitude: not timed", file=sys.stderr)
                    del runners[name]
            ms = time_rounds(runners, args.rounds, args.per_round)
            row = f"{op + ' b' + str(batch):<12}" + "".join(
                f"{ms[n]:>16.3f}" if n in ms else f"{'-':>16}" for n in names)
            for n in names[1:]:
                if n in ms:
                    ratios[n].append(ms[n] / ms["onnxruntime"])
                    row += f"{ms[n] / ms['onnxruntime']:>22.2f}"
                else:
                    row += f"{'-':>22}"
            print(row + f"{os.getloadavg()[0]:>7.2f}" + (f"  ({'; '.join(notes)})" if notes else ""))
    print_summary(ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
