"""nnplug.InferenceSession side by side with onnxruntime's, on a Python backend (the core's
test backend); native backends are covered in tests/native/test_session_native.py."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import onnx
import pytest
from models import mlp
from numpy_backend import KERNELS, NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
import nnplug.runcontext
from nnplug import profiling

ort = pytest.importorskip("onnxruntime")


def chain(depth=4, batch="N", seed=0, meta=True) -> onnx.ModelProto:
    """x[N,8] -> (MatMul w_i -> Add b_i -> Relu) x depth -> y[N,8], random weights."""
    rng = np.random.default_rng(seed)
    nodes, inits, prev = [], [], "x"
    for i in range(depth):
        inits += [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal((8,)).astype(np.float32), f"b{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    nodes[-1].output[0] = "y"
    g = helper.make_graph(nodes, "chain",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)],
                          producer_name="nnplug-tests", model_version=3, doc_string="a chain")
    if meta:
        helper.set_model_props(m, {"author": "tests", "task": "regression"})
    return m


def two_outputs() -> onnx.ModelProto:
    """x[2,'C'] -> Relu -> r; Sigmoid(x) -> s; both outputs, one with an unnamed dim."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid")], "two",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, "C"])],
        [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, "C"]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def ort_session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def x_of(n=5, seed=1):
    return np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32)


# -- description --------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [chain, two_outputs, mlp])
def test_inputs_and_outputs_are_described_like_onnxruntime(rt, make):
    model = make()
    ours = nnplug.InferenceSession(model.SerializeToString(), runtime=rt)
    ref = ort_session(model)
    for got, want in ((ours.get_inputs(), ref.get_inputs()), (ours.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.shape, a.type) for a in got] == \
               [(a.name, a.shape, a.type) for a in want]


def test_model_metadata_matches_onnxruntime(rt):
    model = chain()
    ours = nnplug.InferenceSession(model, runtime=rt).get_modelmeta()
    ref = ort_session(model).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "version",
                  "custom_metadata_map"):
        assert getattr(ours, field) == getattr(ref, field), field


# -- running ------------------------------------------------------------------------------------
@pytest.mark.parametrize("level", ["ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
def test_run_returns_onnxruntimes_outputs_as_a_list(rt, level):
    model = two_outputs()
    so = nnplug.SessionOptions()
    so.graph_optimization_level = getattr(nnplug.GraphOptimizationLevel, level)
    ours = nnplug.InferenceSession(model.SerializeToString(), so, runtime=rt)
    ref = ort_session(model)
    x = np.random.default_rng(0).standard_normal((2, 7)).astype(np.float32)
    got, want = ours.run(None, {"x": x}), ref.run(None, {"x": x})
    assert isinstance(got, list) and len(got) == 2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    (only,) = ours.run(["s"], {"x": x})
    np.testing.assert_allclose(only, ref.run(["s"], {"x": x})[0], rtol=1e-6, atol=1e-6)


def test_optimization_levels_fold_and_fuse_as_documented(rt):
    """disable: nothing folded; basic: folded, one node per kernel; all: whole partitions."""
    model = mlp()  # has a ConstantOfShape the core folds
    backend = rt.backends["numpy"].backend
    seen = {}
    for level in ("disable", "basic", "all"):
        so = nnplug.SessionOptions()
        so.graph_optimization_level = level
        backend.builds.clear()
        s = nnplug.InferenceSession(model, so, runtime=rt)
        folded = [n for n, b in s.network.assignment.items() if b.endswith("(folded)")]
        sizes = [len(sg.nodes) for sg, _ in backend.builds]
        seen[level] = (folded, sizes)
    assert seen["disable"] == ([], [1, 1, 1, 1])
    assert seen["basic"] == (["bias"], [1, 1, 1, 1])  # the folding run, then one per node
    assert seen["all"] == (["bias"], [1, 3])


def test_unknown_output_name_is_an_nnplug_error_and_a_value_error(rt):
    s = nnplug.InferenceSession(chain(), runtime=rt)
    with pytest.raises(nnplug.InputError, match="unknown output name.*'nope'.*y") as e:
        s.run(["nope"], {"x": x_of()})
    assert isinstance(e.value, nnplug.NnplugError) and isinstance(e.value, ValueError)
    with pytest.raises(nnplug.ArgumentTypeError, match=r"write \['y'\]"):
        s.run("y", {"x": x_of()})
    with pytest.raises(nnplug.InputError, match="float64.*astype"):
        s.run(None, {"x": x_of().astype(np.float64)})


# -- providers ----------------------------------------------------------------------------------
def test_providers_take_backend_ids_and_mapped_onnxruntime_names(rt):
    assert nnplug.InferenceSession(chain(), providers=["numpy"], runtime=rt).get_providers() == ["numpy"]
    s = nnplug.InferenceSession(chain(), providers=["CPUExecutionProvider"], runtime=rt)
    assert s.get_providers() == ["numpy"]  # the only CPU backend installed here
    s = nnplug.InferenceSession(chain(), providers=[("CPUExecutionProvider", {})], runtime=rt)
    assert s.get_providers() == ["numpy"]
    assert nnplug.get_available_providers(rt) == ["numpy"]


def test_providers_without_an_equivalent_fail_clearly(rt):
    with pytest.raises(nnplug.UnsupportedNodeError, match="cuda backend.*none is installed.*numpy"):
        nnplug.InferenceSession(chain(), providers=["CUDAExecutionProvider"], runtime=rt)
    with pytest.raises(nnplug.UnsupportedNodeError, match="DmlExecutionProvider.*no nnplug equivalent"):
        nnplug.InferenceSession(chain(), providers=["DmlExecutionProvider"], runtime=rt)
    with pytest.raises(nnplug.UnsupportedNodeError, match="'nope' is not available.*numpy"):
        nnplug.InferenceSession(chain(), providers=["nope"], runtime=rt)


# -- options ------------------------------------------------------------------------------------
def test_options_refuse_unknown_names_and_bad_values():
    so = nnplug.SessionOptions()
    with pytest.raises(nnplug.OptionError, match="intra_op_num_thread'.*intra_op_num_threads"):
        so.intra_op_num_thread = 2
    assert isinstance(nnplug.OptionError("x"), AttributeError)
    with pytest.raises(nnplug.InvalidArgumentError, match="intra_op_num_threads must be an integer >= 0"):
        so.intra_op_num_threads = -1
    with pytest.raises(nnplug.InvalidArgumentError, match="log_severity_level must be an integer 0..4"):
        so.log_severity_level = 7
    with pytest.raises(nnplug.InvalidArgumentError, match="graph_optimization_level 'fast'"):
        so.graph_optimization_level = "fast"
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC  # theirs work too
    assert nnplug.session.optimization_of(so.graph_optimization_level) == "basic"
    ro = nnplug.RunOptions()
    ro.tag = "batch-7"
    assert ro.run_tag == "batch-7" and ro.tag == "batch-7"
    with pytest.raises(nnplug.OptionError):
        ro.terminated = True


def test_log_severity_level_sets_the_session_logger(rt, caplog):
    so = nnplug.SessionOptions()
    so.log_severity_level = 1
    with caplog.at_level(1, logger="nnplug.session"):
        nnplug.InferenceSession(chain(), so, runtime=rt)
    assert any("loaded 'chain' on numpy" in r.getMessage() for r in caplog.records)
    so.log_severity_level = 3
    nnplug.InferenceSession(chain(), so, runtime=rt)
    import logging

    assert logging.getLogger("nnplug.session").level == logging.ERROR


def test_threads_setting_reaches_python_backends_that_have_one(rt):
    class Threaded(NumpyBackend):
        id = "threaded"
        threads = None

        def set_num_threads(self, n):
            Threaded.threads = n

    rt.register_backend(Threaded())
    so = nnplug.SessionOptions()
    so.intra_op_num_threads = 3
    nnplug.InferenceSession(chain(), so, providers=["threaded", "numpy"], runtime=rt)
    assert Threaded.threads == 3  # numpy has no setting: kept its default, no error


# -- run options: terminate ---------------------------------------------------------------------
class Gate(NumpyBackend):
    """Its Relu kernels wait at a gate, so a test can act while a run is inside a kernel."""

    id = "gate"

    def __init__(self):
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def build(self, subgraph, target):
        module = super().build(subgraph, target)
        inner = module["run"]

        def run(inputs):
            if any(n.op_type == "Relu" for n in subgraph.nodes):
                self.entered.set()
                assert self.release.wait(30)
            return inner(inputs)

        return nnplug.Module({"run": run})


def test_terminate_set_during_a_run_stops_it_with_a_clear_error():
    gate = Gate()
    with make_runtime(gate) as rt:
        so = nnplug.SessionOptions()
        so.graph_optimization_level = "basic"  # one kernel per node: stops between them
        s = nnplug.InferenceSession(chain(depth=3), so, runtime=rt)
        ro = nnplug.RunOptions()
        ro.run_tag = "job-1"
        future = s.run_async(None, {"x": x_of()}, run_options=ro)
        assert gate.entered.wait(30)
        ro.terminate = True  # from this thread, while the run is inside relu0
        gate.release.set()
        with pytest.raises(nnplug.RunTerminatedError, match="'job-1'.*before node 'matmul1'"):
            future.result(30)
        with pytest.raises(nnplug.RunTerminatedError):
            s.run(None, {"x": x_of()}, ro)
        ro.terminate = False
        np.testing.assert_allclose(s.run(None, {"x": x_of()}, ro)[0],
                                   ort_session(chain(depth=3)).run(None, {"x": x_of()})[0],
                                   rtol=1e-5, atol=1e-5)


# -- async and batches --------------------------------------------------------------------------
def test_run_async_and_run_many_equal_run(rt):
    net = rt.load(chain())
    feeds = [{"x": x_of(n, seed=n)} for n in (1, 3, 2, 1, 4)]
    expected = [net.run(f) for f in feeds]
    futures = [net.run_async(f) for f in feeds]
    for f, want in zip(futures, expected):
        np.testing.assert_array_equal(f.result(30)["y"], want["y"])
    for batch_size in (1, 2, 5, 8):
        got = net.run_many(iter(feeds), batch_size=batch_size)
        assert len(got) == len(feeds)
        for g, want in zip(got, expected):
            assert g["y"].shape == want["y"].shape
            np.testing.assert_allclose(g["y"], want["y"], rtol=1e-6, atol=1e-6)


def test_session_run_async_calls_back_like_onnxruntime(rt):
    s = nnplug.InferenceSession(chain(), runtime=rt)
    done = threading.Event()
    seen = {}

    def callback(outputs, user_data, err):
        seen.update(outputs=outputs, user_data=user_data, err=err)
        done.set()

    s.run_async(None, {"x": x_of()}, callback, "mine")
    assert done.wait(30)
    assert seen["err"] == "" and seen["user_data"] == "mine"
    np.testing.assert_array_equal(seen["outputs"][0], s.run(None, {"x": x_of()})[0])
    done.clear()
    s.run_async(["nope"], {"x": x_of()}, callback, None)
    assert done.wait(30)
    assert seen["outputs"] is None and "unknown output name" in seen["err"]


def test_run_many_refuses_batches_a_fixed_batch_model_cannot_take(rt):
    net = rt.load(chain(batch=1))
    feeds = [{"x": x_of(1, seed=i)} for i in range(3)]
    with pytest.raises(nnplug.InputError, match="input 'x' has shape \\[1, 8\\].*batch_size=1"):
        net.run_many(feeds, batch_size=2)
    assert len(net.run_many(feeds)) == 3
    with pytest.raises(nnplug.InvalidArgumentError, match="batch_size"):
        net.run_many(feeds, batch_size=0)


# -- profiling ----------------------------------------------------------------------------------
def test_profile_has_one_kernel_event_per_partition_run(rt, tmp_path):
    so = nnplug.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "trace")
    so.graph_optimization_level = "basic"
    s = nnplug.InferenceSession(chain(depth=2), so, runtime=rt)
    ro = nnplug.RunOptions()
    ro.run_tag = "second"
    s.run(None, {"x": x_of()})
    s.run(None, {"x": x_of(3)}, ro)
    path = s.end_profiling()
    assert path.startswith(str(tmp_path / "trace_")) and path.endswith(".json")
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    assert all(e["ph"] == "X" and {"ts", "dur", "pid", "tid"} <= set(e) for e in events)
    runs = [e for e in events if e["cat"] == "run"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert [r["args"] for r in runs] == [{}, {"tag": "second"}]
    assert len(kernels) == 2 * 6  # six nodes, one kernel each, two runs
    assert [e["args"]["nodes"] for e in kernels[:3]] == [["matmul0"], ["add0"], ["relu0"]]
    first = kernels[0]["args"]
    assert first["backend"] == "numpy" and first["op_type"] == "MatMul"
    assert first["input_shapes"] == [[5, 8]] and first["output_shapes"] == [[5, 8]]
    assert kernels[6]["args"]["input_shapes"] == [[3, 8]]
    for k in kernels[:6]:  # inside the first run
        assert runs[0]["ts"] <= k["ts"] and k["ts"] + k["dur"] <= runs[0]["ts"] + runs[0]["dur"] + 1
    assert s.end_profiling() == ""  # ended: nothing more is recorded
    rows = profiling.by_op_type(path)
    assert {r.op_type: r.count for r in rows} == {"MatMul": 4, "Add": 4, "Relu": 4}


def test_kernel_events_name_each_backends_partition():
    """Two host backends: each partition one kernel event (fused nodes named), no copies
    between them (copies at device edges: tests/native/test_session_native.py)."""
    only_mm = NumpyBackend(ops=set(KERNELS) - {"Relu"}, id="mm")
    with make_runtime(only_mm, NumpyBackend()) as r2:
        prof = profiling.Profiler()
        net = r2.load(chain(depth=2), backends=["mm", "numpy"])
        profiling.profiled(net, {"x": x_of()}, prof)
        kernels = [e for e in prof.events() if e["cat"] == "kernel"]
        assert [e["args"]["backend"] for e in kernels] == ["mm", "numpy", "mm", "numpy"]
        assert [e["args"]["nodes"] for e in kernels][:2] == [["matmul0", "add0"], ["relu0"]]
        assert kernels[0]["args"]["fused"] and kernels[0]["args"]["op_type"] == "MatMul+Add"
        assert not [e for e in prof.events() if e["cat"] == "copy"]  # same device: no copy


def test_python_backends_may_record_their_own_kernel_events():
    class Timed(NumpyBackend):
        id = "timed"

        def build(self, subgraph, target):
            inner = super().build(subgraph, target)["run"]

            def run(inputs):
                prof = nnplug.runcontext.current().profiler
                t0 = time.perf_counter_ns()
                out = inner(inputs)
                if prof is not None:
                    for n in subgraph.nodes:  # one event per node it ran
                        prof.kernel(self.id, [n], t0, time.perf_counter_ns(), [], [])
                return out

            return nnplug.Module({"run": run})

    with make_runtime(Timed()) as r2:
        prof = profiling.Profiler()
        profiling.profiled(r2.load(chain(depth=2)), {"x": x_of()}, prof)
    kernels = [e["args"]["nodes"] for e in prof.events() if e["cat"] == "kernel"]
    assert kernels == [[n.name] for n in chain(depth=2).graph.node]  # and no partition event


def test_profile_summary_chart_and_table(tmp_path):
    prof = profiling.Profiler()
    prof.add("a", "kernel", 0, 3000, {"op_type": "Conv+Relu"})
    prof.add("b", "kernel", 0, 1000, {"op_type": "Add"})
    prof.add("copy x", "copy", 0, 1000, {})
    rows = profiling.by_op_type(prof)
    assert [(r.op_type, r.count, r.total_us) for r in rows] == \
           [("Conv+Relu", 1, 3.0), ("Add", 1, 1.0), ("(copy)", 1, 1.0)]
    assert "Conv+Relu" in profiling.format_table(rows)
    svg = profiling.write_chart(rows, str(tmp_path / "c.svg"))
    text = open(svg).read()
    assert text.startswith("<svg") and "Conv+Relu" in text and text.count("<rect") == 3
    with pytest.raises(nnplug.InvalidArgumentError, match=r"\.svg or \.png"):
        profiling.write_chart(rows, str(tmp_path / "c.gif"))


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call, second", [
    (lambda: nnplug.device("nodevice"), ValueError),
    (lambda: nnplug.device("cpu:x"), ValueError),
    (lambda: nnplug.Tensor.empty((2,), np.float32, nnplug.Device(100, 0)), ValueError),
    (lambda: nnplug.from_dlpack(object()), TypeError),
    (lambda: nnplug.Module({}), TypeError),
    (lambda: nnplug.Module({"run": print})["nope"], KeyError),
    (lambda: nnplug.register_device_type("Bad Name"), ValueError),
    (lambda: nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path=3, entry_points=False)),
     TypeError),
])
def test_api_misuse_raises_nnplug_errors_that_keep_the_builtin_base(call, second):
    with pytest.raises(nnplug.NnplugError) as e:
        call()
    assert isinstance(e.value, second)


def test_a_network_collected_while_backends_are_published_does_not_deadlock():
    """A Network in a reference cycle (here: an exception a future keeps) is closed by the
    garbage collector wherever it runs, possibly while this thread publishes a backend."""
    import gc

    from nnplug import registry

    r1 = make_runtime(NumpyBackend(id="doomed"))
    net = r1.load(chain())
    cycle = [net]
    cycle.append(cycle)  # only the collector frees it
    r1.close()
    del net, cycle
    real_add = registry.Namespace.add
    collected = []

    def add_and_collect(self, *args, **kwargs):  # as if allocating here had triggered a collection
        with registry._holding_lock():  # while this thread holds the registry
            real_add(self, *args, **kwargs)
            collected.append(gc.collect())

    done = threading.Event()

    def register():
        registry.Namespace.add = add_and_collect
        try:
            with make_runtime(NumpyBackend(id="fresh")):
                pass
        finally:
            registry.Namespace.add = real_add
        done.set()

    worker = threading.Thread(target=register, daemon=True)
    worker.start()
    assert done.wait(30), "deadlock: the collected network's release waited for its own lock"
    assert "doomed" not in nnplug.list_target_kinds()  # released once the lock was let go
    assert "fresh" not in nnplug.list_target_kinds() and collected
