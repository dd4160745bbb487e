"""Per-node dispatch cost: a chain of 1,000 small Add nodes (y = y + x on a 1x64 float32
tensor), microseconds per node on nnplug's cpu backend beside onnxruntime.

    python benchmarks/dispatch.py [--nodes 1000] [--size 64] [--runs 200] [--threads 2]

The work per node is tiny, so the time is what it costs to get from one node to the next.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np
from onnx import TensorProto, helper


def chain_model(nodes: int, size: int):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])
    y = helper.make_tensor_value_info(f"y{nodes}", TensorProto.FLOAT, [1, size])
    body = [helper.make_node("Add", ["x" if i == 0 else f"y{i}", "x"], [f"y{i + 1}"], name=f"add{i}")
            for i in range(nodes)]
    graph = helper.make_graph(body, "add_chain", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def median_us(fn, runs: int) -> float:
    for _ in range(5):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ["NNPLUG_CPU_THREADS"] = str(args.threads)
    import onnxruntime as ort

    import nnplug

    model = chain_model(args.nodes, args.size)
    x = np.random.default_rng(0).random((1, args.size), dtype=np.float32)
    want = x * (args.nodes + 1)

    rt = nnplug.Runtime()
    if "cpu" not in rt.backends:
        print("nnplug-backend-cpu is not installed", file=sys.stderr)
        return 1
    net = rt.load(model, backends=["cpu"])
    got = net.run({"x": x})[f"y{args.nodes}"]
    np.testing.assert_allclose(got, want, rtol=1e-3)  # 1,000 float32 additions
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    t_nnplug = median_us(lambda: net.run({"x": x}), args.runs)
    t_ort = median_us(lambda: sess.run(None, {"x": x}), args.runs)
    n = args.nodes
    print(f"chain of {n} Add nodes on (1, {args.size}) float32, threads={args.threads}")
    print(f"{'engine':<14}{'us/run':>12}{'us/node':>12}")
    print(f"{'nnplug-cpu':<14}{t_nnplug:>12.1f}{t_nnplug / n:>12.3f}")
    print(f"{'onnxruntime':<14}{t_ort:>12.1f}{t_ort / n:>12.3f}")
    print(f"ratio nnplug-cpu / onnxruntime: {t_nnplug / t_ort:.2f} "
          f"(load average {os.getloadavg()[0]:.2f}: only a figure taken near 0 counts)")
    net.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
