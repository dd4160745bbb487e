"""Models and helpers shared by the proof tools (``differential.py``, ``fuzz.py``): ONNX's
light model zoo with its shipped or random weights, the ``.onnx`` files this repository
ships, ONNX's node suite, random inputs, and a Runtime with the installed backends."""

from __future__ import annotations

import glob
import os
from importlib import metadata

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MAX_INPUT_ELEMENTS = 1 << 22


def zoo_names() -> list[str]:
    return sorted(os.path.basename(p)[len("light_"):-len(".onnx")]
                  for p in glob.glob(os.path.join(ZOO, "light_*.onnx")))


def zoo_model(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(ZOO, f"light_{name}.onnx"))


def shipped_models() -> list[str]:
    """The .onnx files inside this repository's packages (demo models and the like)."""
    return sorted(glob.glob(os.path.join(ROOT, "packages", "*", "src", "**", "*.onnx"),
                            recursive=True))


def randomize_weights(model: onnx.ModelProto, seed: int) -> onnx.ModelProto:
    """The zoo's weights are ConstantOfShape fills: replace each by random values of its
    shape (He-scaled for Conv/Gemm kernels, the fill value times U(0.5, 1.5) otherwise),
    and scale every other float initializer by U(0.5, 1.5) (signs, hence positive
    variances, kept)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    rng = np.random.default_rng(seed)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    kernel_of = {n.input[1]: n for n in g.node
                 if n.op_type in ("Conv", "Gemm") and len(n.input) > 1}
    keep = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = [int(d) for d in inits[node.input[0]]]
            value = 0.0
            for a in node.attribute:
                if a.name == "value":
                    value = float(numpy_helper.to_array(a.t).ravel()[0])
            if node.output[0] in kernel_of:
                user = kernel_of[node.output[0]]
                trans_b = any(a.name == "transB" and a.i for a in user.attribute)
                fan_in = int(np.prod(shape[1:])) if user.op_type == "Conv" or trans_b else shape[0]
                arr = rng.normal(0.0, np.sqrt(2.0 / max(fan_in, 1)), shape)
            else:
                arr = value * rng.uniform(0.5, 1.5, shape) if value else rng.normal(0, 0.1, shape)
            g.initializer.append(numpy_helper.from_array(arr.astype(np.float32), node.output[0]))
            if m.ir_version < 4:  # initializers must also be graph inputs there
                g.input.append(onnx.helper.make_tensor_value_info(
                    node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    del g.node[:]
    g.node.extend(keep)
    for i, init in enumerate(g.initializer):  # shipped float weights: scaled, signs kept
        arr = numpy_helper.to_array(init)
        if arr.dtype == np.float32 and arr.size > 1 and init.name not in kernel_of:
            new = (arr * rng.uniform(0.5, 1.5, arr.shape)).astype(np.float32)
            g.initializer[i].CopyFrom(numpy_helper.from_array(new, init.name))
    return m


def random_inputs(model: onnx.ModelProto, seed: int, symbolic: int = 1) -> dict | None:
    """Random feeds for the graph inputs (symbolic dims = ``symbolic``); None when an input
    is not a plain tensor or too large."""
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        if not vi.type.HasField("tensor_type"):
            return None
        tt = vi.type.tensor_type
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
        except Exception:  # noqa: BLE001 - an element type numpy lacks
            return None
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else symbolic
                 for d in tt.shape.dim]
        if int(np.prod(shape, dtype=np.int64)) > MAX_INPUT_ELEMENTS:
            return None
        if dtype.kind == "f":
            feeds[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iu":
            feeds[vi.name] = rng.integers(0, 4, shape).astype(dtype)
        elif dtype.kind == "b":
            feeds[vi.name] = rng.random(shape) > 0.5
        else:
            return None
    return feeds


def backend_entry_points() -> dict:
    """Installed backends of this repository (``nnplug.backends`` entry points) by name."""
    return {ep.name: ep for ep in metadata.entry_points(group="nnplug.backends")
            if ep.module.startswith("nnplug_backend_")}


def runtime(backends: list[str]):
    """An isolated Runtime with exactly ``backends`` registered (from their entry points)."""
    import nnplug

    rt = nnplug.Runtime(nnplug.CreationOptions.isolated())
    eps = backend_entry_points()
    for name in backends:
        obj = eps[name].load()
        if callable(obj) and not isinstance(obj, type):
            obj = obj()
        rt.register_backend(obj)
    return rt


def opencl_available() -> bool:
    try:
        from nnplug_backend_opencl import devices

        return bool(devices.visible_devices())
    except Exception:  # noqa: BLE001 - not installed, or pyopencl without a platform
        return False


def cpu_has(flag: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and flag in line.split() for line in f)
    except OSError:
        return False
