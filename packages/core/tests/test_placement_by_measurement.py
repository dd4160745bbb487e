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


class Entry(NumpyBackend):
    """Right answers, ``entry`` seconds late on every partition run (a layout change on the
    way in and out), and ``matmul`` seconds more where the partition holds a MatMul."""

    def __init__(self, entry, matmul=0.0, **kw):
        super().__init__(**kw)
        self.entry, self.matmul = entry, matmul

    def build(self, subgraph, target):
        run = super().build(subgraph, target)["run"]
        late = self.entry + (self.matmul if any(n.op_type == "MatMul" for n in subgraph.nodes)
                             else 0.0)

        def slow(inputs):
            time.sleep(late)
            return run(inputs)

        return Module({"run": slow})


def two_layers():
    """MatMul -> Relu -> MatMul -> Relu on [2, 4]: four partitions when only the first backend
    runs MatMul."""
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m1"], name="mm1"),
         helper.make_node("Relu", ["m1"], ["r1"], name="relu1"),
         helper.make_node("MatMul", ["r1", "w2"], ["m2"], name="mm2"),
         helper.make_node("Relu", ["m2"], ["y"], name="relu2")], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(W[:3] * 2, "w2")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def two_layers_expected():
    return np.maximum(np.maximum(X @ W, 0) @ (W[:3] * 2), 0)


def test_a_split_that_loses_as_a_whole_runs_on_one_backend(cache):
    # each MatMul partition is faster where the order put it (10 ms against 30), so the
    # per-partition check keeps it; but four partitions cost 80 ms where the second backend
    # runs the whole network in one partition of 30 ms
    split = Entry(0.010, ops={"MatMul"}, id="split")
    whole = Entry(0.030, id="whole")
    with make_runtime(split, whole, placement="measure") as rt:
        net = rt.load(two_layers(), backends=["split", "whole"])
        assert set(net.assignment.values()) == {"whole"}
        text = net.explain_placement()
        assert "declined by split: measured slower as a whole" in text
        assert "split over split and whole" in text
        np.testing.assert_allclose(net.run({"x": X})["y"], two_layers_expected(), rtol=1e-6)
    assert any(k.startswith("whole:") for k in json.loads(cache.read_text())["entries"])


def test_a_split_that_wins_as_a_whole_is_kept(cache):
    # the second backend runs everything, but its MatMul partitions are 40 ms late: the
    # split (10 + 1 + 10 + 1 ms) stays
    split = Entry(0.010, ops={"MatMul"}, id="split")
    whole = Entry(0.001, matmul=0.040, id="whole")
    with make_runtime(split, whole, placement="measure") as rt:
        net = rt.load(two_layers(), backends=["split", "whole"])
        assert net.assignment == {"mm1": "split", "relu1": "whole", "mm2": "split",
                                  "relu2": "whole"}
        np.testing.assert_allclose(net.run({"x": X})["y"], two_layers_expected(), rtol=1e-6)


def test_a_partition_is_timed_writing_only_what_the_network_reads_after_it(cache):
    # mm1 -> relu1 on the first backend, mm2 -> relu2 likewise: the first partition hands on
    # only r1 (m1 stays inside it), as it does when the network runs
    class Recording(NumpyBackend):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.outputs = []

        def build(self, subgraph, target):
            self.outputs.append(list(subgraph.outputs))
            return super().build(subgraph, target)

    first, second = Recording(id="first"), Recording(id="second")
    with make_runtime(first, second, placement="measure") as rt:
        net = rt.load(two_layers(), backends=["first", "second"])
        np.testing.assert_allclose(net.run({"x": X})["y"], two_layers_expected(), rtol=1e-6)
    assert first.outputs and all(outs == ["y"] for outs in first.outputs), first.outputs
