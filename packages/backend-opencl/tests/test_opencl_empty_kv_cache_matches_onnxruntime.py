"""A decoder's first step concatenates an empty KV cache (past length 0): the Concat, MatMul
and Softmax this backend claims run for every shape the model allows (an empty past, a zero
batch, an empty sequence) as onnxruntime does. The reference backend stands in for the cpu
backend after it, taking what this one declines."""

from __future__ import annotations

from conftest import ReferenceCPUBackend, new_runtime

from nnplug_backend_opencl import OpenCLBackend
from nnplug_conformance import kv_cache


def test_opencl_empty_kv_cache_matches_onnxruntime():
    with new_runtime(OpenCLBackend, ReferenceCPUBackend()) as rt:
        assignment = kv_cache.assert_matches_onnxruntime(rt, ["opencl", "refcpu"])
    for node in ("cache_k", "cache_v", "scores", "softmax", "context"):
        assert assignment[node] == "opencl", assignment
