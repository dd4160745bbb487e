"""The fixed cost of a run: tiny models whose kernels take almost no time, so what is timed is
the way from ``run()`` to the native call and back, nnplug beside onnxruntime.

    python benchmarks/fixed_cost.py [--runs 2000] [--rounds 9] [--backend cpu]

Models: one Relu on [1, 8] float32; a chain of 10 elementwise nodes on [1, 8]; a small MLP
(two Gemm + Relu, [1, 16] -> 32 -> 4); the one Relu on [N, 8] (a symbolic batch: shapes
asked at run time, in the backend's one run_dynamic call). Per model it times, interleaved in one process (each
engine ``--runs`` runs in turn, ``--rounds`` times, the median per-run time of each engine's
rounds): ``Network.run``, ``nnplug.InferenceSession.run``,
``nnplug.onnxruntime.InferenceSession.run`` and onnxruntime's ``InferenceSession.run``
(``intra_op_num_threads=1``). It prints microseconds per run, each nnplug entry's ratio to
onnxruntime and the load average: on a shared machine only the ratios of one run compare.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from functools import partial

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "fixed_cost", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _vi(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def one_node():
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [_vi("x", [1, 8])], [_vi("y", [1, 8])])


def one_node_symbolic():
    return _model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                  [_vi("x", ["N", 8])], [_vi("y", ["N", 8])])


def chain10():
    ops = ["Relu", "Neg", "Abs", "Sigmoid", "Neg", "Abs", "Relu", "Tanh", "Neg", "Abs"]
    nodes = [helper.make_node(op, ["x" if i == 0 else f"t{i}"], [f"t{i + 1}" if i < 9 else "y"],
                              name=f"n{i}") for i, op in enumerate(ops)]
    return _model(nodes, [_vi("x", [1, 8])], [_vi("y", [1, 8])])


def mlp():
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
             for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 4)), ("b2", (4,)))]
    nodes = [helper.make_node("Gemm", ["x", "w1", "b1"], ["h"], name="fc1"),
             helper.make_node("Relu", ["h"], ["r"], name="act"),
             helper.make_node("Gemm", ["r", "w2", "b2"], ["y"], name="fc2")]
    return _model(nodes, [_vi("x", [1, 16])], [_vi("y", [1, 4])], inits)


MODELS = {"one node (Relu [1,8])": (one_node, (1, 8)),
          "10-node elementwise chain": (chain10, (1, 8)),
          "MLP 16-32-4": (mlp, (1, 16)),
          "one node, symbolic batch": (one_node_symbolic, (1, 8))}


def per_run_us(fn, runs: int) -> float:
    t = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - t) / runs * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--backend", default="cpu",
                    help="a backend id, or 'default': no providers (the installed backends in "
                         "their declared order; CPUExecutionProvider for nnplug.onnxruntime)")
    args = ap.parse_args(argv)
    os.environ.setdefault("NNPLUG_CPU_THREADS", "1")
    import onnxruntime as ort

    import nnplug
    import nnplug.onnxruntime as nort

    rt = nnplug.Runtime()
    default = args.backend == "default"
    if not default and args.backend not in rt.backends:
        print(f"backend {args.backend!r} is not installed", file=sys.stderr)
        return 1
    print(f"load average {os.getloadavg()[0]:.2f} at the start; backend {args.backend}, "
          f"{args.runs} runs x {args.rounds} rounds, medians of the rounds")
    for title, (make, shape) in MODELS.items():
        model = make()
        data = model.SerializeToString()
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        feeds = {"x": x}
        so = ort.SessionOptions()
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        ref = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"])
        net = rt.load(model, backends=None if default else [args.backend])
        sess = nnplug.InferenceSession(data, providers=None if default else [args.backend],
                                       runtime=rt)
        nso = nort.SessionOptions()
        nso.intra_op_num_threads = 1
        osess = nort.InferenceSession(
            data, nso, providers=["CPUExecutionProvider"] if default else [args.backend],
            runtime=rt)
        want = ref.run(None, feeds)[0]
        for got in (net.run(feeds)["y"], sess.run(None, feeds)[0], osess.run(None, feeds)[0]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        engines = {"Network.run": partial(net.run, feeds),
                   "nnplug.InferenceSession.run": partial(sess.run, None, feeds),
                   "nnplug.onnxruntime...run": partial(osess.run, None, feeds),
                   "onnxruntime": partial(ref.run, None, feeds)}
        times = {k: [] for k in engines}
        for fn in engines.values():
            per_run_us(fn, 50)  # warm up
        for _ in range(args.rounds):
            for k, fn in engines.items():
                times[k].append(per_run_us(fn, args.runs))
        base = statistics.median(times["onnxruntime"])
        print(f"\n{title}  (load average {os.getloadavg()[0]:.2f}; on "
              f"{', '.join(sorted(set(net.assignment.values())))})")
        print(f"  {'engine':<30}{'us/run':>10}{'/ ort':>8}")
        for k, ts in times.items():
            t = statistics.median(ts)
            print(f"  {k:<30}{t:>10.2f}{t / base:>8.2f}")
        net.close()
        sess.close()
        osess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
