"""The native custom-op host: callbacks, errors, overrides, threads, GPU target."""

import gc
import logging
import os
import threading

import numpy as np
import pytest
from models import single_op, with_custom_op
from numpy_backend import NumpyBackend, make_runtime

import nnplug
from nnplug import CustomOpError, PluginError

RNG = np.random.default_rng(7)


def scale_model(shape=(2, "C"), scale=2.0, domain="com.example"):
    return single_op("cstScale", [list(shape)], {"scale": scale}, domain=domain)


def x_of(shape):
    return RNG.standard_normal(shape).astype(np.float32)


def test_callbacks_init_once_prepare_and_compute_per_run_destroy_once(op_libs, events):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(scale_model(), backends=["numpy"])
        assert events() == ["init:node"]
        for _ in range(3):
            net.run({"in0": x_of((2, 4))})
        assert events() == ["init:node"] + ["prepare:node", "compute:node"] * 3
        net.close()
        net.close()
        assert events().count("destroy:node") == 1
        assert events()[-1] == "destroy:node"


def test_destroy_runs_when_a_network_is_garbage_collected(op_libs, events):
    with make_runtime() as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(scale_model())
        net.run({"in0": x_of((2, 3))})
        del net
        gc.collect()
        assert events() == ["init:node", "prepare:node", "compute:node", "destroy:node"]


def test_results_match_numpy_with_the_node_attribute(op_libs):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(with_custom_op(domain="my.vendor"), backends=["numpy"])
        assert net.assignment["custom"] == "op:cstScale@cpu"
        for c in (1, 5, 64):  # the symbolic dimension changes per run: shape_infer per run
            x = x_of((2, c))
            y = net.run({"x": x})["y"]
            np.testing.assert_allclose(y, 1 / (1 + np.exp(-2.0 * np.maximum(x, 0))), rtol=1e-6)


def test_a_failing_callback_names_op_node_and_callback_and_the_runtime_stays_usable(op_libs):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(single_op("cstFail", [[3]], domain="t"))
        bad = np.array([-1, 2, 3], np.float32)
        with pytest.raises(CustomOpError) as e:
            net.run({"in0": bad})
        text = str(e.value)
        assert "'cstFail'" in text and "'node'" in text and "compute()" in text
        assert "negative first element" in text
        good = np.array([1, 2, 3], np.float32)
        np.testing.assert_array_equal(net.run({"in0": good})["out"], good)
        net2 = rt.load(scale_model(shape=(3,), scale=3.0))
        np.testing.assert_allclose(net2.run({"in0": good})["out"], good * 3)


def test_init_can_decline_a_node_so_the_backend_kernel_runs(op_libs, events):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        assert rt.ops["Relu"].override
        net2d = rt.load(single_op("Relu", [[2, 3]]))
        net3d = rt.load(single_op("Relu", [[2, 3, 4]]))
        assert net2d.assignment == {"node": "op:Relu@cpu"}
        assert net3d.assignment == {"node": "numpy"}  # init returned NNP_OP_SKIP
        x = x_of((2, 3, 4))
        np.testing.assert_array_equal(net3d.run({"in0": x})["out"], np.maximum(x, 0))
        x2 = x_of((2, 3))
        np.testing.assert_array_equal(net2d.run({"in0": x2})["out"], np.maximum(x2, 0))
        net3d.close()
        assert events().count("destroy:node") == 0  # declined: nothing more is called


def test_an_override_takes_precedence_over_the_backend_and_can_be_switched_off(op_libs):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        assert rt.load(single_op("Relu", [[2, 3]])).assignment == {"node": "op:Relu@cpu"}
    with make_runtime(NumpyBackend(), disable_op_overrides=True) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(single_op("Relu", [[2, 3]]))
        assert net.assignment == {"node": "numpy"}


def test_a_cpu_op_runs_with_no_backend_at_all(op_libs):
    with make_runtime() as rt:
        rt.register_custom_ops_library(op_libs["good"])
        x = x_of((4, 2))
        np.testing.assert_allclose(rt.load(scale_model(shape=(4, 2), scale=0.5)).run(
            {"in0": x})["out"], x * 0.5)


def test_each_op_type_is_registered_once(op_libs):
    with make_runtime() as rt:
        ops = rt.register_custom_ops_library(op_libs["good"])
        assert sorted(op.op_type for op in ops) == ["Relu", "cstFail", "cstScale"]
        assert rt.ops["cstScale"].targets == ("gpu", "cpu")
        with pytest.raises(PluginError, match="already registered"):
            rt.register_custom_ops_library(op_libs["good"])

        class Py:
            op_type = "cstScale"

            def shape_infer(self, node, s, d):
                return s, d

            def compute(self, node, inputs):
                return inputs

        with pytest.raises(PluginError, match="already registered"):
            rt.register_custom_op(Py())


@pytest.mark.parametrize("variant, stage, words", [
    ("bad_major", "abi version", "major version 2"),
    ("bad_minor", "abi version", "newer"),
    ("bad_native", "invalid op", "compute_native"),
    ("bad_no_compute", "invalid op", "compute is NULL"),
    ("no_entry", "no entry symbol", "nnp_custom_op_entry"),
])
def test_a_bad_library_is_refused_with_its_stage(op_libs, variant, stage, words):
    with make_runtime() as rt:
        with pytest.raises(PluginError) as e:
            rt.register_custom_ops_library(op_libs[variant])
        assert e.value.stage == stage and words in e.value.reason and e.value.fix
        assert rt.ops == {}


def test_missing_files_and_non_libraries_are_refused(tmp_path):
    with make_runtime() as rt:
        with pytest.raises(PluginError, match="not found"):
            rt.register_custom_ops_library(tmp_path / "libnnplug_op_none.so")
        text = tmp_path / "libnnplug_op_text.so"
        text.write_text("not a shared object\n")
        with pytest.raises(PluginError) as e:
            rt.register_custom_ops_library(text)
        assert e.value.stage == "not loadable"


def _folder(tmp_path, op_libs, names):
    d = tmp_path / "ops"
    d.mkdir()
    for variant in names:
        src = op_libs[variant]
        os.symlink(src, d / os.path.basename(src))
    return d


def test_a_folder_loads_exactly_the_valid_libraries_and_reports_the_rest(tmp_path, op_libs,
                                                                         caplog):
    d = _folder(tmp_path, op_libs, ["good", "bad_major", "bad_minor", "no_entry"])
    (d / "libnnplug_op_text.so").write_text("text")
    (d / "libother.so").write_text("not an op library name: never opened")
    (d / "libnnplug_op_dir.so").mkdir()
    os.symlink(tmp_path / "gone.so", d / "libnnplug_op_dangling.so")
    with caplog.at_level(logging.WARNING, logger="nnplug"):
        rt = nnplug.Runtime(nnplug.CreationOptions.isolated(custom_op_paths=str(d)))
    with rt:
        assert sorted(rt.ops) == ["Relu", "cstFail", "cstScale"]
        failed = {os.path.basename(e.source): e.stage for e in rt.load_errors}
        assert failed == {
            "libnnplug_op_bad_major.so": "abi version",
            "libnnplug_op_bad_minor.so": "abi version",
            "libnnplug_op_no_entry.so": "no entry symbol",
            "libnnplug_op_text.so": "not loadable",
            "libnnplug_op_dir.so": "file",
            "libnnplug_op_dangling.so": "file",
        }
        assert sum("skipped plugin" in r.message for r in caplog.records) == len(failed)
        x = x_of((2, 3))
        np.testing.assert_allclose(rt.load(scale_model()).run({"in0": x})["out"], 2 * x)


def test_paths_come_from_the_option_then_the_environment(tmp_path, op_libs, monkeypatch):
    d = _folder(tmp_path, op_libs, ["good"])
    monkeypatch.setenv("NNPLUG_CUSTOM_OP_PATH", f"{d}::relative/dir:{tmp_path / 'missing'}")
    with nnplug.Runtime(nnplug.CreationOptions(entry_points=False,
                                               dynamic_backends_path="")) as rt:
        assert "cstScale" in rt.ops
        assert sorted(e.reason for e in rt.load_errors) == ["no such folder",
                                                            "relative path ignored"]
        assert all("NNPLUG_CUSTOM_OP_PATH" in e.source for e in rt.load_errors)
    with nnplug.Runtime(nnplug.CreationOptions.isolated(custom_op_paths=[str(tmp_path)])) as rt:
        assert rt.ops == {} and rt.load_errors == []
    with nnplug.Runtime(nnplug.CreationOptions.isolated()) as rt:
        assert rt.ops == {}


def test_a_second_folder_library_with_the_same_op_type_is_reported(tmp_path, op_libs):
    d = _folder(tmp_path, op_libs, ["good"])
    import shutil

    shutil.copy(op_libs["good"], d / "libnnplug_op_zcopy.so")
    with nnplug.Runtime(nnplug.CreationOptions.isolated(custom_op_paths=str(d))) as rt:
        assert sorted(rt.ops) == ["Relu", "cstFail", "cstScale"]
        assert [(os.path.basename(e.source), e.stage) for e in rt.load_errors] == [
            ("libnnplug_op_zcopy.so", "duplicate op")]


def test_verbose_logging_shows_callbacks_and_tensor_attributes(op_libs, caplog):
    with make_runtime() as rt, caplog.at_level(logging.DEBUG, logger="nnplug.ops"):
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(scale_model(shape=(2, 3)))
        net.run({"in0": x_of((2, 3))})
        net.close()
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == "nnplug.ops")
    for callback in ("init(", "prepare(", "compute(", "destroy()", "get_attr('scale')"):
        assert f"cstScale[node] {callback}" in text
    assert "in0: float32[2,3] n_elems=6 size=24" in text


def test_many_threads_run_one_network_with_identical_results(op_libs):
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(with_custom_op())
        x = x_of((2, 33))
        want = net.run({"x": x})["y"]
        results, errors = [], []

        def work():
            try:
                for _ in range(20):
                    results.append(net.run({"x": x})["y"])
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and len(results) == 160
        assert all(np.array_equal(r, want) for r in results)


def test_an_override_without_shape_infer_keeps_the_onnx_shapes(op_libs):
    from nnplug.stages.loader import load

    with make_runtime() as rt:
        rt.register_custom_ops_library(op_libs["good"])
        node = load(single_op("Relu", [[2, "N"]])).nodes[0]
        assert rt.ops["Relu"].shape_infer(node, [[2, "N"]], [np.float32]) == (
            [[2, "N"]], [np.float32])


# -- GPU target ---------------------------------------------------------------------------------
class NoHandlesBackend(NumpyBackend):
    """A backend on an OpenCL device whose device API declares no OpenCL handles (the
    DeviceAPI default)."""

    id = "nohandles"
    device_type = "opencl"


def test_a_gpu_kernel_is_not_used_where_the_device_api_gives_no_opencl_handles(op_libs, caplog):
    with make_runtime(NoHandlesBackend(), NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        assert rt.ops["cstScale"].targets == ("gpu", "cpu")
        with caplog.at_level(logging.WARNING, logger="nnplug"):
            net = rt.load(scale_model(), backends=["nohandles", "numpy"])
        assert net.assignment["node"] == "op:cstScale@cpu"
        assert "backend 'nohandles' exposes no OpenCL handles (DeviceAPI.opencl_handles)" \
            in caplog.text
        x = x_of((2, 3))
        np.testing.assert_allclose(net.run({"in0": x})["out"], 2.0 * x, rtol=1e-6)
        net.close()


@pytest.mark.opencl
def test_gpu_kernel_runs_on_the_opencl_backend_queue(op_libs, events, opencl_backend):
    with make_runtime(opencl_backend(), NumpyBackend()) as rt:
        rt.register_custom_ops_library(op_libs["good"])
        net = rt.load(with_custom_op(), backends=["opencl", "numpy"])
        assert net.assignment["custom"] == "op:cstScale@gpu"
        for c in (3, 1000):
            x = x_of((2, c))
            np.testing.assert_allclose(net.run({"x": x})["y"],
                                       1 / (1 + np.exp(-2.0 * np.maximum(x, 0))), rtol=1e-5)
        net.close()
        assert events() == (["init:custom"] + ["prepare:custom", "compute:custom"] * 2
                            + ["destroy:custom"])
        # cpu preferred: the CPU struct of the same op type runs
        assert rt.load(with_custom_op(), backends=["numpy", "opencl"]).assignment["custom"] \
            == "op:cstScale@cpu"
