"""Models and helpers shared by the proof tools (``differential.py``, ``fuzz.py``): ONNX's
light model zoo with its shipped or random weights, the ``.onnx`` files this repository
ships, ONNX's node suite, random inputs, and a Runtime with the installed backends (random
zoo weights: nnplug_conformance.zoo.randomize_weights)."""

from __future__ import annotations

import glob
import os
from importlib import metadata

import numpy as np
import onnx

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
