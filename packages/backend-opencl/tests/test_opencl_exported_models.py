"""The small exported CNNs and transformers of the monorepo (random weights, made by
packages/backend-cpu/tests/models/export_models.py) on ["opencl", a CPU backend]: each loads,
matches onnxruntime, and runs most of its nodes on the device."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from conftest import ReferenceCPUBackend, new_runtime

from nnplug_backend_opencl import OpenCLBackend

MODELS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "backend-cpu",
                      "tests", "models")
MANIFEST = os.path.join(MODELS, "manifest.json")
ENTRIES = {}
if os.path.isfile(MANIFEST):  # a checkout of the monorepo; an sdist of this package has none
    with open(MANIFEST) as f:
        ENTRIES = {k: v for k, v in json.load(f).items()
                   if v["family"] in ("torchvision", "transformers")}


def feeds_for(entry, rng):
    out = {}
    for spec in entry["inputs"]:
        kind, shape, dt = spec["kind"], spec["shape"], spec["dtype"]
        if kind.startswith("ids:"):
            out[spec["name"]] = rng.integers(0, int(kind[4:]), shape).astype(dt)
        elif kind == "ones":
            out[spec["name"]] = np.ones(shape, dt)
        else:
            out[spec["name"]] = rng.standard_normal(shape).astype(dt)
    return out


@pytest.fixture(scope="module")
def mixed():
    r = new_runtime(OpenCLBackend, ReferenceCPUBackend())
    yield r
    r.close()


@pytest.mark.skipif(not ENTRIES, reason="the monorepo's exported models are not here")
@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_exported_model_runs_mostly_on_opencl_and_matches_onnxruntime(mixed, name):
    import onnxruntime as ort

    entry = ENTRIES[name]
    path = os.path.join(MODELS, entry["file"])
    feeds = feeds_for(entry, np.random.default_rng(0))
    net = mixed.load(path, backends=["opencl", "refcpu"])
    try:
        placed = [v for v in net.assignment.values() if "folded" not in v]
        on_device = sum(v == "opencl" for v in placed)
        assert on_device >= 0.5 * len(placed), net.assignment
        got = net.run(feeds)
    finally:
        net.close()
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    for o, want in zip(sess.get_outputs(), sess.run(None, feeds)):
        g = np.asarray(got[o.name])
        assert g.shape == want.shape and g.dtype == want.dtype, o.name
        scale = float(np.max(np.abs(want))) or 1.0
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-4 * scale, err_msg=o.name)
