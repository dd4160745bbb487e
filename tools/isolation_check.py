"""Check an environment's installed nnplug plugins: the ones named present are installed,
discovered and working; the ones named absent are not installed and are reported cleanly.

Run inside the environment under test (the noxfile's ``isolation`` and ``wheels`` sessions):

    python tools/isolation_check.py --present nnplug-backend-cpu \
        --absent nnplug-backend-opencl --absent-backend opencl

Working means: every ``nnplug.backends`` entry point of a present distribution registers a
backend of that name with no load error and runs ``nnplug demo`` with it; every ``nnplug.ops``
entry point registers its ops (custom ops or function bodies, ``Runtime.register_function``),
and each custom op runs a one-node model. Absent backends make
``nnplug demo --backend ID`` fail with one clear line naming the package to install.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib import metadata

import numpy as np


def fail(msg: str) -> None:
    print(f"isolation check FAILED: {msg}", file=sys.stderr)
    sys.exit(1)


PARTNERS = {"onednn": "cpu"}
"""Backends that decline by design what they do not run: when the partner is present too, their
demo runs with it behind them (``--backend onednn --backend cpu``)."""
CLI_TIMEOUT_S = 600  # the demo takes seconds; minutes mean a hang, which must fail, not stall CI


def cli(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "nnplug", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        fail(f"nnplug {' '.join(args)} did not finish in {CLI_TIMEOUT_S} s (a hang?); "
             f"output so far:\n{out}")


def entry_points_of(dist: str, group: str) -> list[metadata.EntryPoint]:
    return [ep for ep in metadata.distribution(dist).entry_points if ep.group == group]


def one_node_model(op_type: str, domain: str, shape=(2, 3, 5)):
    from onnx import TensorProto, helper

    node = helper.make_node(op_type, ["x"], ["y"], name=f"only_{op_type}", domain=domain)
    graph = helper.make_graph(
        [node], f"one_{op_type}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        # same rank as the input, sizes left to shape inference
        [helper.make_tensor_value_info(
            "y", TensorProto.INT64 if op_type == "ArgMax" else TensorProto.FLOAT,
            [f"d{i}" for i in range(len(shape))])],
    )
    opsets = [helper.make_opsetid("", 17)]
    if domain:
        opsets.append(helper.make_opsetid(domain, 1))
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def reference(op_type: str, x: np.ndarray):
    """What a one-node model of ``op_type`` with default attributes must give, where known."""
    if op_type == "ArgMax":  # ONNX defaults: axis 0, keepdims 1
        return np.argmax(x, axis=0)[None].astype(np.int64)
    if op_type == "cstSoftmax":  # axis -1 by default (custom-op issue)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    return None


def check_ops(rt, op_types: list[str]) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    for op_type in op_types:
        op = rt.ops[op_type]
        domain = "" if op.override else "com.example.isolation"
        net = rt.load(one_node_model(op_type, domain))
        y = net.run({"x": x})["y"]
        want = reference(op_type, x)
        if want is not None and (y.shape != want.shape or not np.allclose(y, want, rtol=1e-5,
                                                                         atol=1e-6)):
            fail(f"op {op_type} from {op.source}: a one-node model gives {y!r}, expected {want!r}")
        print(f"op {op_type}: ran on {sorted(set(net.assignment.values()))}, output {y.shape} "
              f"{y.dtype}{' (matches the reference)' if want is not None else ''}")
        net.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--present", nargs="*", default=[], help="distributions that must work")
    ap.add_argument("--absent", nargs="*", default=[], help="distributions that must be absent")
    ap.add_argument("--absent-backend", action="append", default=[],
                    help="backend ids that must be reported missing")
    ap.add_argument("--no-demo", action="store_true", help="skip running the demo per backend")
    args = ap.parse_args()

    import nnplug

    print(f"nnplug {nnplug.__version__} from {nnplug.__file__}")
    for dist in args.absent:
        try:
            metadata.distribution(dist)
        except metadata.PackageNotFoundError:
            continue
        fail(f"{dist} is installed but must not be in this environment")

    rt = nnplug.Runtime()
    if rt.load_errors:
        fail("load errors:\n  " + "\n  ".join(str(e) for e in rt.load_errors))
    bare = nnplug.Runtime(nnplug.CreationOptions(entry_points=False))
    entry_point_ops = sorted(set(rt.ops) - set(bare.ops))
    entry_point_functions = sorted(set(rt.functions) - set(bare.functions))
    bare.close()

    backend_ids = []
    for dist in args.present:
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            fail(f"{dist} is not installed")
        ids = []
        for ep in entry_points_of(dist, "nnplug.backends"):
            if ep.name not in rt.backends:
                fail(f"{dist} {version}: entry point {ep.name} = {ep.value} registered no backend "
                     f"with that id (registered: {', '.join(rt.backends) or 'none'})")
            ids.append(ep.name)
        backend_ids += ids
        n_ops = len(entry_points_of(dist, "nnplug.ops"))
        if n_ops and not entry_point_ops and not entry_point_functions:
            fail(f"{dist} {version}: {n_ops} nnplug.ops entry point(s) but no op or function "
                 f"registered")
        print(f"{dist} {version}: backends {ids or '-'}, ops entry points {n_ops}")

    info = cli("info")
    if info.returncode != 0 or "load errors" in info.stdout:
        fail(f"nnplug info (exit {info.returncode}):\n{info.stdout}{info.stderr}")
    print(info.stdout, end="")

    if entry_point_ops:
        check_ops(rt, entry_point_ops)
    if entry_point_functions:  # bodies: what runs them is a backend's, checked by its tests
        domains = sorted({d or "ai.onnx" for d, _ in entry_point_functions})
        print(f"functions: {len(entry_point_functions)} registered ({', '.join(domains)}), "
              f"from {', '.join(sorted({rt.functions[k].source for k in entry_point_functions}))}")
    rt.close()

    if not args.no_demo:
        for bid in backend_ids:
            partner = PARTNERS.get(bid)
            behind = ["--backend", partner] if partner in backend_ids else []
            demo = cli("demo", "--backend", bid, *behind)
            if demo.returncode != 0 or "OK" not in demo.stdout:
                fail(f"nnplug demo --backend {bid} (exit {demo.returncode}):\n"
                     f"{demo.stdout}{demo.stderr}")
            print(f"demo on {bid}: " + demo.stdout.strip().splitlines()[-1])

    for bid in args.absent_backend:
        demo = cli("demo", "--backend", bid)
        err = demo.stderr.strip()
        if demo.returncode == 0 or "Traceback" in err or len(err.splitlines()) > 3 or \
                "pip install" not in err:
            fail(f"an absent backend {bid!r} must fail with a short message naming the package "
                 f"to install; got exit {demo.returncode}:\n{demo.stdout}{err}")
        print(f"absent backend {bid}: {err.splitlines()[0]}")
    print("isolation check passed")


if __name__ == "__main__":
    main()
