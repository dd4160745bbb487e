"""Batch inference throughput on Ray (nnplug-ray) beside a plain loop in one process.

    python benchmarks/ray_batch.py [--model resnet50] [--rows 48] [--batch-size 8] [--repeat 2]

The light zoo's model (the onnx package's ``backend/test/data/light``, as benchmarks/zoo.py uses)
runs on nnplug's cpu backend with one thread per worker:

- loop: one process, one Network, ``net.run`` row by row;
- ray, 1 actor / 2 actors: ``nnplug_ray.predict`` on a local Ray instance with 2 CPUs, one CPU
  per actor, the whole dataset materialized (actor start and model load included);
- ray, 1 row: the same with one row, which is the fixed cost of a job (actors, model load).

Per-batch overhead of Ray = (1-actor time - job fixed cost - rows x loop time per row) / batches.
Each figure is the best of --repeat runs and is printed with the load average. Needs nnplug,
nnplug-backend-cpu and nnplug-ray installed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import onnx

ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a light zoo model name")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)

    os.environ["NNPLUG_CPU_THREADS"] = "1"  # one thread per worker, the loop too
    import nnplug

    path = os.path.join(ZOO, f"light_{args.model}.onnx")
    with open(path, "rb") as f:
        model = f.read()
    rt = nnplug.Runtime()
    if "cpu" not in rt.backends:
        print("nnplug-backend-cpu is not installed", file=sys.stderr)
        return 1
    net = rt.load(model, backends=["cpu"])
    (inp,) = net.inputs
    sample = tuple(inp.shape[1:])
    rng = np.random.default_rng(0)
    x = rng.random((args.rows, *sample), dtype=np.float32)

    def loop():
        for i in range(args.rows):
            net.run({inp.name: x[i:i + 1]})

    net.run({inp.name: x[:1]})  # warm up
    t_loop = best(loop, args.repeat)
    per_row = t_loop / args.rows
    print(f"model light_{args.model}, input {inp.name} {list(inp.shape)}, {args.rows} rows, "
          f"batch size {args.batch_size}")
    print(f"loop, 1 process:   {args.rows / t_loop:7.2f} rows/s ({per_row * 1e3:.1f} ms/row); {load()}")

    import ray

    import nnplug_ray

    os.environ.setdefault("RAY_TMPDIR", tempfile.mkdtemp(prefix="nnr-", dir="/tmp"))
    ray.init(num_cpus=2, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    name = inp.name

    def job(rows: int, concurrency: int):
        ds = ray.data.from_items([{name: x[i]} for i in range(rows)], override_num_blocks=min(rows, 8))
        return lambda: nnplug_ray.predict(ds, model, backends=["cpu"], concurrency=concurrency,
                                          batch_size=args.batch_size).materialize()

    t_fixed = best(job(1, 1), args.repeat)
    print(f"ray, 1 row:        {t_fixed:7.2f} s per job (actor start, model load); {load()}")
    t_ray = {}
    for n in (1, 2):
        t_ray[n] = best(job(args.rows, n), args.repeat)
        print(f"ray, {n} actor(s):   {args.rows / t_ray[n]:7.2f} rows/s "
              f"({t_ray[n]:.2f} s, {args.rows / (t_ray[n] - t_fixed):.2f} rows/s after the fixed "
              f"cost); {load()}")
    batches = -(-args.rows // args.batch_size)
    overhead = (t_ray[1] - t_fixed - (args.rows - 1) * per_row) / max(1, batches - 1)
    print(f"ray overhead per batch (1 actor): {overhead * 1e3:.1f} ms "
          f"({overhead / (args.batch_size * per_row) * 100:.1f}% of a batch's compute); {load()}")
    ray.shutdown()
    net.close()
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
