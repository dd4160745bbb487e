"""The conformance suite's edge values and empty tensors (nnplug_conformance.edge_values) pass on
this backend: among them Clip with an omitted bound, which clips +-inf to float32's largest
value as ONNX and onnxruntime define it."""

from nnplug_conformance import run_conformance


def test_cpu_conformance_edge_values_pass(tmp_path):
    result = run_conformance("cpu", cwd=str(tmp_path), timeout=900, args=["-k", "test_edge_values", "-rf"])
    assert result.returncode == 0, result.stdout[-6000:]
