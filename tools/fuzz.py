"""Fuzz proof: seeded mutations of zoo models and ONNX node cases, each loaded and run in a
child process. A child killed by a signal, a child that hangs, or an exception that is not
one of nnplug's errors (``NnplugError``) fails the run; nnplug refusing a broken model with
its own error is the expected outcome.

    python tools/fuzz.py                          # 300 mutations, at most 240 s, seed 0
    python tools/fuzz.py --count 1000 --seconds 900 --seed 7 --backends cpu
    python tools/fuzz.py --replay 0:123           # one mutation (seed:index) in this process

Mutations: an attribute's value (ints, floats, lists, strings: zero, negative, huge,
INT64_MIN, NaN, dropped or repeated elements), a graph input's dims or rank (inputs are
fed at the mutated shape), an initializer's dims (its data kept), a node's inputs swapped
or dropped, and the serialized bytes truncated or flipped. Each child is forked from a
parent that has imported nnplug but loaded no backend, so a mutation costs milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import traceback

import numpy as np
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proofcases  # noqa: E402

ZOO_SEEDS = ["squeezenet", "shufflenet", "inception_v1", "bvlc_alexnet"]
HANG_S = 60.0
INTS = [0, -1, 1, 2, 3, 7, 99, -99, 2**31, 2**62, -(2**63), 2**63 - 1]
FLOATS = [0.0, -1.0, 1e30, -1e30, float("nan"), float("inf"), 1e-30]


# -- seeds and mutations ------------------------------------------------------------------------
def seeds(node_sample: int, rng) -> list[tuple[str, onnx.ModelProto]]:
    from nnplug_conformance import node_tests

    out = [(f"zoo/{n}", proofcases.zoo_model(n)) for n in ZOO_SEEDS
           if n in proofcases.zoo_names()]
    cases = node_tests.collect()
    for i in rng.choice(len(cases), size=min(node_sample, len(cases)), replace=False):
        out.append((f"node/{cases[i].name}", cases[i].load_model()))
    return out


def _mutate_attribute(m: onnx.ModelProto, rng) -> str | None:
    nodes = [n for n in m.graph.node if n.attribute]
    if not nodes:
        return None
    node = nodes[rng.integers(len(nodes))]
    a = node.attribute[rng.integers(len(node.attribute))]
    T = onnx.AttributeProto
    if a.type == T.INT:
        a.i = int(rng.choice(INTS))
    elif a.type == T.FLOAT:
        a.f = float(rng.choice(FLOATS))
    elif a.type == T.INTS:
        vals = list(a.ints)
        how = rng.integers(4)
        if how == 0 and vals:
            vals[rng.integers(len(vals))] = int(rng.choice(INTS))
        elif how == 1 and vals:
            vals.pop(rng.integers(len(vals)))
        elif how == 2 and vals:
            vals.append(vals[rng.integers(len(vals))])
        else:
            vals = [int(rng.choice(INTS)) for _ in range(rng.integers(0, 6))]
        del a.ints[:]
        a.ints.extend(vals)
    elif a.type == T.FLOATS:
        vals = list(a.floats) or [1.0]
        vals[rng.integers(len(vals))] = float(rng.choice(FLOATS))
        del a.floats[:]
        a.floats.extend(vals)
    elif a.type == T.STRING:
        a.s = rng.choice([b"", b"bogus", b"\xff\xfe", b"NOTSET", b"reflect", b"x" * 300])
    elif a.type == T.TENSOR:
        a.t.dims.append(int(rng.integers(0, 3)))
    else:
        return None
    return f"attribute {a.name!r} of node {node.name or node.op_type!r}"


def _mutate_input_shape(m: onnx.ModelProto, rng) -> str | None:
    inits = {i.name for i in m.graph.initializer}
    inputs = [i for i in m.graph.input if i.name not in inits and i.type.HasField("tensor_type")]
    if not inputs:
        return None
    vi = inputs[rng.integers(len(inputs))]
    dims = vi.type.tensor_type.shape.dim
    how = rng.integers(3)
    if how == 0 and len(dims):
        d = dims[rng.integers(len(dims))]
        d.Clear()
        d.dim_value = int(rng.choice([0, 1, 2, 3, 5, 64]))
    elif how == 1 and len(dims):
        dims.pop()
    else:
        dims.add().dim_value = int(rng.choice([1, 2, 3]))
    return f"shape of input {vi.name!r}"


def _mutate_initializer(m: onnx.ModelProto, rng) -> str | None:
    inits = list(m.graph.initializer)
    if not inits:
        return None
    t = inits[rng.integers(len(inits))]
    dims = list(t.dims)
    how = rng.integers(3)
    if how == 0 and dims:
        dims[rng.integers(len(dims))] = int(rng.choice([0, 1, 2, 1000, 2**40]))
    elif how == 1 and dims:
        dims.pop()
    else:
        dims.append(int(rng.choice([1, 2, 3])))
    del t.dims[:]
    t.dims.extend(dims)
    return f"dims of initializer {t.name!r}"


def _mutate_wiring(m: onnx.ModelProto, rng) -> str | None:
    nodes = [n for n in m.graph.node if len(n.input) >= 1]
    if not nodes:
        return None
    node = nodes[rng.integers(len(nodes))]
    ins = list(node.input)
    if len(ins) >= 2 and rng.integers(2):
        i, j = rng.choice(len(ins), 2, replace=False)
        ins[i], ins[j] = ins[j], ins[i]
    else:
        ins[rng.integers(len(ins))] = ""
    del node.input[:]
    node.input.extend(ins)
    return f"inputs of node {node.name or node.op_type!r}"


MUTATIONS = [_mutate_attribute, _mutate_attribute, _mutate_input_shape, _mutate_initializer,
             _mutate_wiring]


def mutate(seed_model: onnx.ModelProto, rng) -> tuple[bytes, str]:
    kind = rng.integers(10)
    if kind == 0:  # truncated bytes
        data = seed_model.SerializeToString()
        cut = int(rng.integers(0, len(data)))
        return data[:cut], f"bytes truncated at {cut} of {len(data)}"
    if kind == 1:  # flipped bytes
        data = bytearray(seed_model.SerializeToString())
        for _ in range(int(rng.integers(1, 8))):
            data[rng.integers(len(data))] = int(rng.integers(256))
        return bytes(data), "bytes flipped"
    m = onnx.ModelProto()
    m.CopyFrom(seed_model)
    what = []
    for _ in range(int(rng.integers(1, 3))):
        fn = MUTATIONS[rng.integers(len(MUTATIONS))]
        w = fn(m, rng)
        if w:
            what.append(w)
    return m.SerializeToString(), "; ".join(what) or "unchanged"


def feeds_for(data: bytes, seed: int) -> dict | None:
    try:
        model = onnx.load_from_string(data)
    except Exception:  # noqa: BLE001 - unreadable bytes: loading alone is the test
        return None
    return proofcases.random_inputs(model, seed)


# -- one mutation (child) -----------------------------------------------------------------------
def exercise(data: bytes, backends: list[str], seed: int) -> str:
    """Load and run one mutated model; 'ok', 'refused: ...' or raises a non-nnplug error."""
    import nnplug

    rt = proofcases.runtime(backends)
    try:
        with rt.load(data, backends=backends) as net:
            feeds = feeds_for(data, seed)
            if feeds is not None:
                with np.errstate(all="ignore"):
                    net.run(feeds)
        return "ok"
    except nnplug.NnplugError as e:
        return f"refused: {type(e).__name__}"
    finally:
        rt.close()


def in_child(data: bytes, backends: list[str], seed: int) -> dict:
    """Fork, exercise the mutation in the child, report how it ended."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(r)
        try:
            out = {"outcome": exercise(data, backends, seed)}
        except BaseException as e:  # noqa: BLE001 - every escape is a finding
            out = {"outcome": "exception", "error": f"{type(e).__name__}: {str(e)[:300]}",
                   "trace": traceback.format_exc()[-1500:]}
        os.write(w, json.dumps(out).encode())
        os.close(w)
        os._exit(0)
    os.close(w)
    deadline = time.monotonic() + HANG_S
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.005)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(r)
        return {"outcome": "hang", "error": f"still running after {HANG_S:.0f} s"}
    chunks = []
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(r)
    if os.WIFSIGNALED(status):
        sig = signal.Signals(os.WTERMSIG(status)).name
        return {"outcome": "signal", "error": f"killed by {sig}"}
    try:
        return json.loads(b"".join(chunks) or b"{}") or {"outcome": "exception",
                                                       "error": "child wrote nothing"}
    except ValueError:
        return {"outcome": "exception", "error": "child output unreadable"}


# -- driver -------------------------------------------------------------------------------------
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--count", type=int, default=300, help="mutations (default 300)")
    p.add_argument("--seconds", type=float, default=240, help="time budget (default 240 s)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backends", default="cpu", help="comma-separated backend ids (default cpu)")
    p.add_argument("--node-seeds", type=int, default=150, help="node cases to mutate from")
    p.add_argument("--replay", help="SEED:INDEX: run that one mutation here, with its traceback")
    p.add_argument("--report", help="write the findings as JSON here")
    args = p.parse_args(argv)
    backends = args.backends.split(",")
    if args.replay:
        args.seed, index = (int(x) for x in args.replay.split(":"))
        args.count = index + 1
    rng = np.random.default_rng(args.seed)
    pool = seeds(args.node_seeds, rng)
    print(f"fuzz: seed {args.seed}, {len(pool)} seed models, backends {', '.join(backends)}, "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    start = time.monotonic()
    findings, outcomes, done = [], {}, 0
    for i in range(args.count):
        name, model = pool[rng.integers(len(pool))]
        data, what = mutate(model, rng)
        if args.replay:
            if i == args.count - 1:
                print(f"#{i} {name}: {what}")
                print(exercise(data, backends, args.seed + i))
            continue
        if time.monotonic() - start > args.seconds:
            break
        res = in_child(data, backends, args.seed + i)
        done += 1
        key = res["outcome"]  # "ok", "refused: ModelError", ..., or a finding
        outcomes[key] = outcomes.get(key, 0) + 1
        if res["outcome"] in ("exception", "signal", "hang"):
            findings.append({"index": i, "seed_model": name, "mutation": what, **res})
            print(f"  FINDING #{i} ({args.seed}:{i}) {name}: {what}: {res['outcome']}: "
                  f"{res.get('error')}", flush=True)
    if args.replay:
        return 0
    took = time.monotonic() - start
    print(f"fuzz: {done} mutations in {took:.0f} s: "
          + ", ".join(f"{v} {k}" for k, v in sorted(outcomes.items()))
          + f"; {len(findings)} finding(s); load average {os.getloadavg()[0]:.2f}")
    if args.report:
        with open(args.report, "w") as f:
            json.dump(findings, f, indent=1)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
