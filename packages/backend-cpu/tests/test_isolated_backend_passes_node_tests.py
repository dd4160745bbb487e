"""The backend isolated in a worker process (``isolate_plugins="cpu"``) gives ONNX's expected
outputs: the first node test of every op it runs (and every dtype variant of a few ops whose
kernels differ by dtype), planned, built and run through the worker. The full set runs with
``NNPLUG_ISOLATE_PLUGINS=cpu pytest --pyargs nnplug_conformance --nnplug-backend cpu``."""

from __future__ import annotations

import numpy as np
import pytest
from test_onnx_node_tests import CASES, tolerance

import nnplug
import nnplug_backend_cpu
from nnplug import onnx_backend
from nnplug.native.isolated import IsolatedBackend

_BY_DTYPE = ("Cast", "Add", "Where", "Gather")


def _representative(cases):
    seen, out = set(), []
    for c in cases:
        key = tuple(sorted(c.op_types))
        if key not in seen or any(op in c.op_types for op in _BY_DTYPE):
            seen.add(key)
            out.append(c)
    return out


SOME = _representative(CASES)


@pytest.fixture(scope="module")
def isolated():
    rt = nnplug.Runtime(nnplug.CreationOptions.isolated(isolate_plugins="cpu"))
    rt.register_backend(nnplug_backend_cpu.library_path())
    assert isinstance(rt.backends["cpu"].backend, IsolatedBackend)
    mp = pytest.MonkeyPatch()
    mp.setenv("NNPLUG_BACKENDS", "cpu")
    onnx_backend.set_runtime(rt)
    yield onnx_backend
    onnx_backend.set_runtime(None)
    mp.undo()
    rt.close()


def test_the_isolated_backend_matches_onnx_expected_outputs(isolated):
    claimed, failures = 0, []
    for case in SOME:
        try:
            rep = isolated.prepare(case.model, "CPU")
        except nnplug.UnsupportedNodeError:
            continue  # declined in process too (a dtype or attribute it does not handle)
        claimed += 1
        rtol, atol = tolerance(case)
        try:
            for inputs, expected in case.data_sets:
                got = rep.run(inputs)
                for g, w in zip(got, expected):
                    assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, g.dtype, w.shape)
                    if w.dtype.kind in "biuUO":
                        np.testing.assert_array_equal(g, w)
                    else:
                        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        except Exception as e:  # noqa: BLE001 - collected, all reported at once
            failures.append(f"{case.name}: {type(e).__name__}: {str(e)[:300]}")
        finally:
            rep.network.close()
    assert not failures, "\n".join(failures)
    assert claimed >= 0.8 * len(SOME), (claimed, len(SOME))
