"""Loading, placing, partitioning and running models on Python backends."""

import threading

import numpy as np
import onnx
import pytest
from models import mlp, single_op
from numpy_backend import NumpyBackend, make_runtime
from onnx.reference import ReferenceEvaluator

import nnplug
from nnplug import InputError, ModelError, UnsupportedNodeError
from nnplug.discovery import dist_installed


def reference(model, feeds):
    return ReferenceEvaluator(model).run(None, feeds)


@pytest.fixture
def feeds():
    return {"x": np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)}


def test_model_loads_from_path_bytes_and_proto(tmp_path, feeds):
    m = mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(m, path)
    want = reference(m, feeds)[0]
    with make_runtime(NumpyBackend()) as rt:
        for model in (str(path), path, m.SerializeToString(), m):
            out = rt.load(model).run(feeds)["y"]
            np.testing.assert_allclose(out, want, rtol=1e-6)


def test_bad_model_inputs_name_the_file_or_problem(tmp_path):
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"\x00\x01not a model")
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(ModelError, match="does not exist"):
            rt.load(str(tmp_path / "missing.onnx"))
        with pytest.raises(ModelError, match="garbage.onnx"):
            rt.load(str(garbage))
        with pytest.raises(ModelError, match="is a directory"):
            rt.load(str(tmp_path))
        with pytest.raises(ModelError, match="path, bytes or onnx.ModelProto"):
            rt.load(42)


def test_nodes_go_to_the_first_backend_that_supports_them(feeds):
    partial = NumpyBackend(ops={"MatMul", "ConstantOfShape"}, id="partial")
    full = NumpyBackend(id="full")
    with make_runtime(partial, full) as rt:
        net = rt.load(mlp(), backends=["partial", "full"])
        assert net.assignment == {"bias": "partial (folded)", "matmul": "partial",
                                  "add": "full", "relu": "full"}
        np.testing.assert_allclose(net.run(feeds)["y"], reference(mlp(), feeds)[0], rtol=1e-6)
        # the other order puts everything on "full"
        net = rt.load(mlp(), backends=["full", "partial"])
        assert set(net.assignment.values()) == {"full", "full (folded)"}


def test_partitions_are_built_once_with_folded_constants():
    partial = NumpyBackend(ops={"MatMul", "ConstantOfShape"}, id="partial")
    full = NumpyBackend(id="full")
    with make_runtime(partial, full) as rt:
        rt.load(mlp(), backends=["partial", "full"])
        # partial: one build for the constant subgraph, one for the MatMul partition
        assert len(partial.builds) == 2
        (sg, target), = full.builds
        assert [n.name for n in sg.nodes] == ["add", "relu"]
        assert sg.inputs == ["m"] and sg.outputs == ["y"]
        np.testing.assert_array_equal(sg.constants["b"], np.full((1, 3), 0.25, np.float32))
        assert target.kind.name == "full"


def test_unsupported_node_error_names_op_node_domain_opset_and_backends():
    with make_runtime(NumpyBackend(), NumpyBackend(id="other", ops={"Relu"})) as rt:
        with pytest.raises(UnsupportedNodeError) as e:
            rt.load(single_op("Tanh", [[2]]), backends=["numpy"])
    msg = str(e.value)
    for part in ("'node'", "Tanh", "ai.onnx", "opset 17", "tried: numpy",
                 "installed backends: numpy, other", "Registered but not tried: 'other'",
                 _package_advice("nnplug-backend-cpu")):
        assert part in msg


def _package_advice(dist: str) -> str:
    """What an error says about a backend package: it is installed but unregistered, or the
    naming rule of backend packages (the core names none)."""
    return dist if dist_installed(dist) else "backend packages are named nnplug-backend-<id>"


def test_unknown_backend_id_suggests_the_package():
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(UnsupportedNodeError, match="'opencl' is not available") as e:
            rt.load(mlp(), backends=["opencl"])
    if dist_installed("nnplug-backend-opencl"):  # installed: the advice to install it is wrong
        assert "pip install" not in str(e.value)
        assert "nnplug-backend-opencl is installed but registered no backend 'opencl'" in \
            str(e.value)
    else:
        assert "pip install nnplug-backend-opencl" in str(e.value)


def test_installed_backend_package_is_never_advised_for_install(tmp_path, monkeypatch):
    from test_discovery import install_dist

    # a real (metadata-only) nnplug-backend-opencl whose backend this Runtime did not load
    install_dist(tmp_path, "nnplug-backend-opencl", {"nnplug.backends": ["opencl = nope:X"]}, {})
    monkeypatch.syspath_prepend(str(tmp_path))
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(UnsupportedNodeError) as unknown:
            rt.load(mlp(), backends=["opencl"])
        with pytest.raises(UnsupportedNodeError) as unsupported:
            rt.load(single_op("Tanh", [[2]]), backends=["numpy"])
    for e in (unknown, unsupported):
        assert "pip install nnplug-backend-opencl" not in str(e.value), str(e.value)
        assert "nnplug-backend-opencl is installed but" in str(e.value) or \
            "Installed but not registered with this Runtime: " in str(e.value), str(e.value)


def test_feed_too_large_for_memory_is_an_input_error_naming_the_input():
    a = onnx.helper
    g = a.make_graph([a.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                     [a.make_tensor_value_info("x", 1, ["N", 64])],
                     [a.make_tensor_value_info("y", 1, ["N", 64])])
    m = a.make_model(g, opset_imports=[a.make_opsetid("", 17)])
    # 2**31 rows that all share one row of memory: a contiguous copy needs 512 GiB
    x = np.lib.stride_tricks.as_strided(np.zeros(64, np.float32), (2**31, 64), (0, 4))
    with make_runtime(NumpyBackend()) as rt, rt.load(m, backends=["numpy"]) as net:
        with pytest.raises(InputError, match="input 'x'.*549,755,813,888 bytes") as e:
            net.run({"x": x})
    assert isinstance(e.value, nnplug.NnplugError)


def test_symbolic_dims_bind_at_run_time_and_are_checked():
    a = onnx.helper
    g = a.make_graph([a.make_node("Add", ["x", "z"], ["y"], name="add")], "g",
                     [a.make_tensor_value_info("x", 1, ["B", 3]),
                      a.make_tensor_value_info("z", 1, ["B", 3])],
                     [a.make_tensor_value_info("y", 1, ["B", 3])])
    m = a.make_model(g, opset_imports=[a.make_opsetid("", 17)])
    with make_runtime(NumpyBackend()) as rt:
        net = rt.load(m)
        assert net.inputs[0].shape == ("B", 3)
        for b in (1, 7):
            x = np.ones((b, 3), np.float32)
            assert net.run({"x": x, "z": x})["y"].shape == (b, 3)
        with pytest.raises(InputError, match="'B'.*is 2.*is 1 in input 'x'"):
            net.run({"x": np.ones((1, 3), np.float32), "z": np.ones((2, 3), np.float32)})


def test_run_validates_names_dtypes_and_shapes(feeds):
    with make_runtime(NumpyBackend()) as rt:
        net = rt.load(mlp())
        with pytest.raises(InputError, match="dtype float64.*astype"):
            net.run({"x": feeds["x"].astype(np.float64)})
        with pytest.raises(InputError, match="rank 1"):
            net.run({"x": np.ones(4, np.float32)})
        with pytest.raises(InputError, match="unknown input.*'q'"):
            net.run({"x": feeds["x"], "q": 1})
        with pytest.raises(InputError, match="missing input.*'x'"):
            net.run({})
        with pytest.raises(ValueError, match="unknown output name"):
            net.run(feeds, output_names=["nope"])
        assert list(net.run(feeds, output_names=["y"])) == ["y"]


def test_static_inputs_are_checked_by_name_dtype_and_each_dimension():
    m = single_op("Relu", [[3, 4]])
    with make_runtime(NumpyBackend()) as rt:
        net = rt.load(m)
        with pytest.raises(InputError, match="'in0' has dtype float64.*astype"):
            net.run({"in0": np.ones((3, 4), np.float64)})
        with pytest.raises(InputError, match=r"'in0' has shape \(3, 5\).*dimension 1 must be 4"):
            net.run({"in0": np.ones((3, 5), np.float32)})
        with pytest.raises(InputError, match="'in0'.*rank 1"):
            net.run({"in0": np.ones(12, np.float32)})
        x = np.arange(24, dtype=np.float32).reshape(3, 8)[:, ::2] - 10  # not contiguous
        np.testing.assert_array_equal(net.run({"in0": x})["out"], np.maximum(x, 0))


def test_feeds_accept_dlpack_producers(feeds):
    with make_runtime(NumpyBackend()) as rt:
        net = rt.load(mlp())
        t = nnplug.Tensor.from_numpy(feeds["x"])
        np.testing.assert_array_equal(net.run({"x": t})["y"], net.run(feeds)["y"])


def test_one_network_runs_from_many_threads_with_identical_results():
    rng = np.random.default_rng(2)
    inputs = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(8)]
    with make_runtime(NumpyBackend(ops={"MatMul", "ConstantOfShape"}, id="a"),
                      NumpyBackend(id="b")) as rt:
        net = rt.load(mlp())
        want = [net.run({"x": x})["y"] for x in inputs]
        got = [[None] * 20 for _ in inputs]
        errors = []

        def worker(i):
            try:
                for k in range(20):
                    got[i][k] = net.run({"x": inputs[i]})["y"]
            except Exception as e:  # surfaced below
                errors.append(e)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors
        for i in range(8):
            for k in range(20):
                np.testing.assert_array_equal(got[i][k], want[i])


def test_network_keeps_its_backends_after_the_runtime_closes(feeds):
    rt = make_runtime(NumpyBackend())
    net = rt.load(mlp())
    rt.close()
    assert "target.build.numpy" in nnplug.list_funcs("target.build.")
    assert net.run(feeds)["y"].shape == (5, 3)
    net.close()
    assert "target.build.numpy" not in nnplug.list_funcs("target.build.")
    with pytest.raises(nnplug.NnplugError, match="closed"):
        net.run(feeds)


def test_runtime_registers_target_kind_and_global_functions():
    b = NumpyBackend()
    with make_runtime(b) as rt:
        assert rt.backends["numpy"].origin == "api"
        assert nnplug.get_func("device_api.numpy")() is b.device_api()
        assert "numpy" in nnplug.list_target_kinds()
    assert "numpy" not in nnplug.list_target_kinds()


def test_duplicate_and_reserved_backend_ids_are_refused():
    with make_runtime(NumpyBackend()) as rt:
        with pytest.raises(nnplug.PluginError, match="duplicate backend id 'numpy'"):
            rt.register_backend(NumpyBackend())
        with pytest.raises(nnplug.PluginError, match="invalid backend id 'host'"):
            rt.register_backend(NumpyBackend(id="host"))


def test_targets_can_be_given_per_backend():
    b = NumpyBackend()
    with make_runtime(b) as rt:
        rt.load(mlp(), targets={"numpy": '{"kind": "numpy", "tag": "mine"}'})
        assert b.builds[-1][1].attrs["tag"] == "mine"
        with pytest.raises(nnplug.TargetError, match="backend 'numpy'.*colour"):
            rt.load(mlp(), targets={"numpy": {"kind": "numpy", "colour": 1}})


def test_constant_outputs_are_copies_the_caller_may_modify():
    a = onnx.helper
    g = a.make_graph([a.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                     [a.make_tensor_value_info("x", 1, [2])],
                     [a.make_tensor_value_info("y", 1, [2]), a.make_tensor_value_info("c", 1, [2])],
                     [onnx.numpy_helper.from_array(np.array([1, 2], np.float32), "c")])
    m = a.make_model(g, opset_imports=[a.make_opsetid("", 17)])
    with make_runtime(NumpyBackend()) as rt:
        net = rt.load(m)
        out = net.run({"x": np.zeros(2, np.float32)})
        out["c"][:] = 99
        assert net.run({"x": np.zeros(2, np.float32)})["c"].tolist() == [1, 2]


def test_two_live_backends_with_one_id_do_not_unpublish_each_other():
    first, second = NumpyBackend(), NumpyBackend()
    a = make_runtime(first)
    b = make_runtime(second)  # same id "numpy", another object: published on top
    assert nnplug.get_func("device_api.numpy")() is second.device_api()
    b.close()
    # the first backend's names are visible again, and its runtime still loads models
    assert nnplug.get_func("device_api.numpy")() is first.device_api()
    assert "numpy" in nnplug.list_target_kinds()
    assert a.load(mlp()).run({"x": np.ones((1, 4), np.float32)})["y"].shape == (1, 3)
    a.close()
    assert "numpy" not in nnplug.list_target_kinds()


def test_factories_are_leased_by_identity_not_by_a_reusable_id():
    with make_runtime() as rt:
        rt.register_backend(lambda: NumpyBackend(id="one"))
        rt.register_backend(lambda: NumpyBackend(id="two"))
        assert set(rt.backends) == {"one", "two"}


def test_scalar_feeds_and_outputs_keep_rank_zero():
    a = onnx.helper
    g = a.make_graph([a.make_node("Add", ["x", "s"], ["y"], name="add")], "g",
                     [a.make_tensor_value_info("x", 1, [2]), a.make_tensor_value_info("s", 1, [])],
                     [a.make_tensor_value_info("y", 1, [2])])
    m = a.make_model(g, opset_imports=[a.make_opsetid("", 17)])
    with make_runtime(NumpyBackend()) as rt:
        out = rt.load(m).run({"x": np.zeros(2, np.float32), "s": np.array(3, np.float32)})
        assert out["y"].tolist() == [3, 3]
    assert nnplug.Tensor.from_numpy(np.array(1.5, np.float32)).shape == ()


def test_unread_outputs_without_an_inferred_type_are_passed_as_omitted():
    from nnplug.stages.loader import load

    # Dropout-7's mask gets no type from ONNX shape inference; nothing reads it here.
    a = onnx.helper
    g = a.make_graph([a.make_node("Dropout", ["x"], ["y", "mask"], name="drop")], "g",
                     [a.make_tensor_value_info("x", 1, [2])], [a.make_tensor_value_info("y", 1, [2])])
    m = a.make_model(g, opset_imports=[a.make_opsetid("", 7)])
    m.ir_version = 3
    node = load(m).nodes[0]
    assert node.outputs == ["y", ""]


def test_unread_optional_outputs_are_passed_as_omitted_and_read_ones_kept():
    from nnplug.stages.loader import load

    a = onnx.helper
    nodes = [a.make_node("Dropout", ["x"], ["d", "mask"], name="drop"),  # mask: optional, unread
             a.make_node("MaxPool", ["d"], ["p", "idx"], name="pool", kernel_shape=[1, 1]),
             a.make_node("Shape", ["idx"], ["s"], name="read_idx"),  # idx is read: kept
             a.make_node("BatchNormalization", ["p", "sc", "b", "m", "v"], ["y", "rm", "rv", "sm", "sv"],
                         name="bn")]  # unread, but its outputs say training mode: kept
    g = a.make_graph(nodes, "g", [a.make_tensor_value_info("x", 1, [1, 2, 2, 2])],
                     [a.make_tensor_value_info("y", 1, None), a.make_tensor_value_info("s", 7, [4])],
                     [a.make_tensor(n, 1, [2], [1.0, 2.0]) for n in ("sc", "b", "m", "v")])
    got = {n.name: n.outputs for n in load(a.make_model(g, opset_imports=[a.make_opsetid("", 9)])).nodes}
    assert got["drop"] == ["d", ""]
    assert got["pool"] == ["p", "idx"]
    assert got["bn"] == ["y", "rm", "rv", "sm", "sv"]


def test_an_output_read_only_inside_a_subgraph_is_kept():
    from nnplug.stages.loader import load

    a = onnx.helper
    branch = a.make_graph([a.make_node("Identity", ["mask"], ["out"])], "then", [],
                          [a.make_tensor_value_info("out", 9, [2])])
    nodes = [a.make_node("Dropout", ["x"], ["d", "mask"], name="drop"),
             a.make_node("If", ["c"], ["z"], name="if", then_branch=branch, else_branch=branch)]
    g = a.make_graph(nodes, "g", [a.make_tensor_value_info("x", 1, [2]), a.make_tensor_value_info("c", 9, [])],
                     [a.make_tensor_value_info("z", 9, [2])])
    got = {n.name: n.outputs for n in load(a.make_model(g, opset_imports=[a.make_opsetid("", 13)])).nodes}
    assert got["drop"] == ["d", "mask"]


def test_isolated_options_load_no_plugin_and_keep_overrides():
    opts = nnplug.CreationOptions.isolated(backend_preference=["numpy"], custom_op_paths=["/x"])
    assert (opts.entry_points, opts.dynamic_backends_path) == (False, "")
    assert opts.custom_op_paths == ["/x"] and opts.backend_preference == ["numpy"]
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        assert rt.backends == {} and rt.ops == {} and rt.load_errors == []
