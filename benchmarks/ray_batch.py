"""Batch inference throughput on Ray (nnplug-ray) beside a plain loop in one process.

    python benchmarks/ray_batch.py [--model resnet50] [--rows 48] [--batch-size 8] [--repeat 2]

The light zoo's model (the onnx package's ``backend/test/data/light``, as benchmarks/zoo.py uses)
runs on nnplug's cpu backend with one thread per worker:

- loop: one process, one Network, ``net.run`` row by row;
- ray, 1 actor / 2 actors: ``nnplug_ray.predict`` on a local Ray instance with 2 CPUs, one CPU
  per actor, the whole dataset materialized (actor start and model load included);
- ray, 1 row: the same with one row, which is the fixed cost of a job (actors, model load);
- overhead per batch: a model that costs next to nothing (GlobalAveragePool on the same input,
  so the same bytes move) over the same rows in the same blocks (one per --batch-size rows),
  1 actor, once with batches of one row and once with batches of --batch-size rows:
  (time with the many batches - time with the few) / (difference in batches). The fixed cost
  and the compute cancel out; what is left is what Ray adds per batch (the actor call, moving
  the batch through the object store, building the output block).

Each figure is the best of --repeat runs and is printed with the load average. Needs nnplug,
nnplug-backend-cpu and nnplug-ray installed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

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


def cheap_model(name: str, shape: list[int]) -> bytes:
    """GlobalAveragePool of the input: the same rows to move, almost nothing to compute."""
    graph = helper.make_graph(
        [helper.make_node("GlobalAveragePool", [name], ["pooled"])], "cheap",
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, [*shape[:2], 1, 1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a light zoo model name")
    ap.add_argument("--rows", type=int, default=48)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--overhead-rows", type=int, default=384,
                    help="rows of the overhead measurement: enough batches that what Ray adds per "
                         "batch stands above the job-to-job noise (about 0.5 s here)")
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

    own_tmp = None
    if "RAY_TMPDIR" not in os.environ:  # a short folder for Ray's sockets, removed at the end
        own_tmp = os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="nnr-", dir="/tmp")
    ray.init(num_cpus=2, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    name = inp.name

    def job(rows: int, concurrency: int, the_model=model, batch_size=args.batch_size):
        ds = ray.data.from_items([{name: x[i % args.rows]} for i in range(rows)],
                                 override_num_blocks=-(-rows // args.batch_size))
        return lambda: nnplug_ray.predict(ds, the_model, backends=["cpu"], concurrency=concurrency,
                                          batch_size=batch_size).materialize()

    t_fixed = best(job(1, 1), args.repeat)
    print(f"ray, 1 row:        {t_fixed:7.2f} s per job (actor start, model load); {load()}")
    for n in (1, 2):
        t = best(job(args.rows, n), args.repeat)
        print(f"ray, {n} actor(s):   {args.rows / t:7.2f} rows/s ({t:.2f} s for the job; "
              f"{args.rows / max(t - t_fixed, 1e-9):.2f} rows/s less the 1-row job's time); "
              f"{load()}")
    cheap = cheap_model(name, list(inp.shape))
    rows = args.overhead_rows
    few = -(-rows // args.batch_size)
    t_many = best(job(rows, 1, cheap, 1), max(args.repeat, 3))
    t_few = best(job(rows, 1, cheap, args.batch_size), max(args.repeat, 3))
    overhead = (t_many - t_few) / (rows - few)
    print(f"ray overhead per batch (1 actor, {np.prod(sample) * 4 / 1e6:.1f} MB rows): "
          f"{overhead * 1e3:.1f} ms ({t_many:.2f} s for {rows} batches, {t_few:.2f} s for "
          f"{few}); "
          f"that is {overhead / per_row * 100:.1f}% of one row's compute, "
          f"{overhead / (args.batch_size * per_row) * 100:.1f}% of a batch of "
          f"{args.batch_size}; {load()}")
    ray.shutdown()
    if own_tmp:
        shutil.rmtree(own_tmp, ignore_errors=True)
    net.close()
    rt.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
