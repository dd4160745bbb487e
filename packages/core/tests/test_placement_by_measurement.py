"""placement="measure": a partition that two host backends can run is timed on both at load
and runs on the faster; the decision is explained, remembered on disk, and re-measured when
the file is corrupt. Partitions with symbolic shapes, or that a backend fails to build, stay
where the preference order put them."""

import json
import os
import time

import numpy as np
import pytest
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug import Module, Tensor

X = np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4)
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 7


def mlp(batch):
    """x[batch,4] -> MatMul(w) -> Relu -> y: nothing to fold, one partition."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
         helper.make_node("Relu", ["m"], ["y"], name="relu")], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 3])],
        [numpy_helper.from_array(W, "w")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


class Slow(NumpyBackend):
    """Right answers, 20 ms late on every run."""

    def build(self, subgraph, target):
        module = super().build(subgraph, target)
        run = module["run"]

        def slow(inputs):
            time.sleep(0.02)
            return run(inputs)

        return Module({"run": slow})


class Broken(NumpyBackend):
    def build(self, subgraph, target):
        raise RuntimeError("cannot build today")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NNPLUG_CACHE_DIR", str(tmp_path))
    return tmp_path / "placement.json"


def expected():
    return np.maximum(X @ W, 0)


def test_the_faster_backend_runs_a_partition_both_can_run(cache):
    slow, fast = Slow(id="slow"), NumpyBackend(id="fast")
    with make_runtime(slow, fast, placement="measure") as rt:
        net = rt.load(mlp(batch=2), backends=["slow", "fast"])
        assert set(net.assignment.values()) == {"fast"}
        assert "declined by slow: measured slower on these shapes" in net.explain_placement()
        np.testing.assert_array_equal(net.run({"x": X})["y"], expected())
    assert cache.exists()


def test_by_order_the_first_backend_keeps_it(cache):
    with make_runtime(Slow(id="slow"), NumpyBackend(id="fast")) as rt:
        assert set(rt.load(mlp(batch=2), backends=["slow", "fast"]).assignment.values()) == \
            {"slow"}
    assert not cache.exists()


def test_a_second_load_reads_the_decision_instead_of_timing(cache):
    with make_runtime(Slow(id="slow"), NumpyBackend(id="fast"), placement="measure") as rt:
        rt.load(mlp(batch=2), backends=["slow", "fast"])
    slow, fast = Slow(id="slow"), NumpyBackend(id="fast")
    with make_runtime(slow, fast, placement="measure") as rt:
        net = rt.load(mlp(batch=2), backends=["slow", "fast"])
        assert set(net.assignment.values()) == {"fast"}
        assert slow.builds == [] and len(fast.builds) == 1  # the plan's build only


def test_a_corrupt_decisions_file_is_measured_again_and_rewritten(cache):
    cache.write_text("{not json")
    with make_runtime(Slow(id="slow"), NumpyBackend(id="fast"), placement="measure") as rt:
        assert set(rt.load(mlp(batch=2), backends=["slow", "fast"]).assignment.values()) == \
            {"fast"}
    assert json.loads(cache.read_text())["version"] == 1


def test_symbolic_shapes_and_failing_builds_keep_the_order(cache):
    with make_runtime(Slow(id="slow"), NumpyBackend(id="fast"), placement="measure") as rt:
        net = rt.load(mlp(batch="N"), backends=["slow", "fast"])  # nothing to time it on
        assert set(net.assignment.values()) == {"slow"}
    with make_runtime(NumpyBackend(id="first"), Broken(id="broken"), placement="measure") as rt:
        net = rt.load(mlp(batch=2), backends=["first", "broken"])
        assert set(net.assignment.values()) == {"first"}


def test_the_environment_variable_asks_for_it_and_a_bad_value_is_named(cache, monkeypatch):
    monkeypatch.setenv("NNPLUG_PLACEMENT", "measure")
    with make_runtime(Slow(id="slow"), NumpyBackend(id="fast")) as rt:
        assert set(rt.load(mlp(batch=2), backends=["slow", "fast"]).assignment.values()) == \
            {"fast"}
    monkeypatch.setenv("NNPLUG_PLACEMENT", "fastest")
    with make_runtime(NumpyBackend()) as rt, \
            pytest.raises(nnplug.NnplugError, match="NNPLUG_PLACEMENT = 'fastest'.*order, measure"):
        rt.load(mlp(batch=2))


def test_an_unwritable_cache_folder_only_costs_a_measurement(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    os.chmod(folder, 0o500)
    monkeypatch.setenv("NNPLUG_CACHE_DIR", str(folder / "sub"))
    try:
        with make_runtime(Slow(id="slow"), NumpyBackend(id="fast"), placement="measure") as rt:
            assert set(rt.load(mlp(batch=2), backends=["slow", "fast"]).assignment.values()) == \
                {"fast"}
    finally:
        os.chmod(folder, 0o700)


def test_tensor_inputs_to_the_timing_are_host_arrays():
    # the timing feeds what a run feeds: Tensors of host arrays
    from nnplug.graph import SubGraph, ValueInfo
    from nnplug.stages.measure import _inputs

    sg = SubGraph([], ["a", "i"], [], {}, {"a": ValueInfo("a", np.float32, (2, 3)),
                                            "i": ValueInfo("i", np.int64, (4,))}, {}, "t")
    a, i = _inputs(sg)
    assert isinstance(a, Tensor) and a.numpy().shape == (2, 3) and a.numpy().dtype == np.float32
    assert (i.numpy() == 0).all()
