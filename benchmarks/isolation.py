"""What isolation costs: nnplug's cpu backend in a worker process (``isolate_plugins="cpu"``)
beside the same backend in the application process, on a one-node model (the per-run overhead:
a request, a reply and the shared-memory copies) and on a small CNN (throughput).

    python benchmarks/isolation.py [--runs 200] [--batch 8] [--threads 1]

Prints the median time per run, runs per second, the difference, and the load average: the
figures mean something only on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import nnplug
import nnplug_backend_cpu


def one_node():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "one", [x], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), {"x": (1, 64)}


def cnn(batch: int, seed: int = 0):
    """A VGG-like CNN on 3x64x64 images: 4 conv blocks (conv 3x3, relu, max pool), then
    global average pooling and a dense layer to 10 classes; random weights (about 1.2 M)."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev, ch = [], [], "x", 3
    for i, out_ch in enumerate((32, 64, 128, 256)):
        w = (rng.standard_normal((out_ch, ch, 3, 3)) * np.sqrt(2 / (ch * 9))).astype(np.float32)
        b = (rng.standard_normal(out_ch) * 0.01).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes += [
            helper.make_node("Conv", [prev, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}",
                             pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
            helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
            helper.make_node("MaxPool", [f"r{i}"], [f"p{i}"], name=f"pool{i}",
                             kernel_shape=[2, 2], strides=[2, 2]),
        ]
        prev, ch = f"p{i}", out_ch
    fc = (rng.standard_normal((ch, 10)) * np.sqrt(1 / ch)).astype(np.float32)
    inits += [numpy_helper.from_array(fc, "fc"),
              numpy_helper.from_array(np.zeros(10, np.float32), "fcb")]
    nodes += [helper.make_node("GlobalAveragePool", [prev], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
              helper.make_node("Gemm", ["flat", "fc", "fcb"], ["y"], name="dense")]
    g = helper.make_graph(nodes, "cnn",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 64, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
                          inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), \
        {"x": (batch, 3, 64, 64)}


def median_s(fn, runs: int) -> float:
    for _ in range(3):
        fn()
    ts = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def measure(model, shapes, isolate: bool, runs: int, threads: int):
    opts = nnplug.CreationOptions.isolated(isolate_plugins="cpu" if isolate else False)
    with nnplug.Runtime(opts) as rt:
        rt.register_backend(nnplug_backend_cpu.library_path())
        rt.backends["cpu"].backend.set_num_threads(threads)
        t = time.perf_counter()
        net = rt.load(model, backends=["cpu"])
        load_s = time.perf_counter() - t
        rng = np.random.default_rng(1)
        feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}
        out = net.run(feeds)
        run_s = median_s(lambda: net.run(feeds), runs)
        net.close()
    return load_s, run_s, out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=1, help="the backend's threads (both ways)")
    a = p.parse_args(argv)
    print(f"load average (1, 5, 15 min): {', '.join(f'{x:.2f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores; backend threads: {a.threads}")
    print(f"{'model':<22}{'where':<14}{'load ms':>10}{'run us':>12}{'runs/s':>10}")
    for label, (model, shapes), runs in (
            ("one Relu (1x64)", one_node(), a.runs),
            (f"CNN, batch {a.batch}", cnn(a.batch), max(a.runs // 10, 10))):
        results = {}
        for where, isolate in (("in process", False), ("isolated", True)):
            load_s, run_s, out = measure(model, shapes, isolate, runs, a.threads)
            results[where] = (run_s, out)
            print(f"{label:<22}{where:<14}{load_s * 1e3:>10.1f}{run_s * 1e6:>12.1f}"
                  f"{1 / run_s:>10.1f}")
        (mine, o1), (theirs, o2) = results["in process"], results["isolated"]
        for k in o1:
            np.testing.assert_array_equal(o1[k], o2[k])  # the same kernels, the same bytes
        print(f"{'':<22}{'overhead':<14}{'':>10}{(theirs - mine) * 1e6:>+12.1f}"
              f"{(theirs / mine - 1) * 100:>+9.1f}%")
    print(f"load average after: {', '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
