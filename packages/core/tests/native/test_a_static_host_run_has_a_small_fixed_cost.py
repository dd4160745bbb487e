"""A run of a static model on a host-visible native backend with numpy feeds takes the short
way (nnplug.host_path): a bounded number of Python calls whatever the model, one native call,
and exactly what the general path answers and reports (results, aliasing, errors, threads)."""

import sys
import threading

import numpy as np
import pytest
from nativelib import bare_runtime
from onnx import TensorProto, helper, numpy_helper

import nnplug
from nnplug.runcontext import RunContext, running
from nnplug.stages.executor import check_feeds

ort = pytest.importorskip("onnxruntime")


def chain(n=8, passthrough=False, const_out=False):
    """x[2,4] -> (Add c, Relu) x n -> y; with passthrough x is an output too, with const_out
    the constant c is."""
    c = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), "c")
    nodes, prev = [], "x"
    for i in range(n):
        out = "y" if i == n - 1 else f"r{i}"
        nodes += [helper.make_node("Add", [prev, "c"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Relu", [f"a{i}"], [out], name=f"relu{i}")]
        prev = out
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])]
    if passthrough:
        outs.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4]))
    if const_out:
        outs.append(helper.make_tensor_value_info("c", TensorProto.FLOAT, [2, 4]))
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                         [2, 4])], outs, [c])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def reference(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _x(seed=0):
    return np.random.default_rng(seed).standard_normal((2, 4)).astype(np.float32)


def python_calls(fn) -> int:
    """How many Python functions ``fn()`` calls (C functions not counted)."""
    count = 0

    def prof(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count - 1  # fn itself


@pytest.mark.parametrize("nodes", [1, 20])
def test_a_run_makes_a_few_python_calls_whatever_the_model(libs, stats, nodes):
    model = chain(nodes)
    x = _x()
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net, nnplug.InferenceSession(
                model.SerializeToString(), providers=["testcpu"], runtime=rt) as sess:
            net.run({"x": x})
            sess.run(None, {"x": x})
            before = stats("testcpu")
            assert python_calls(lambda: net.run({"x": x})) <= 5
            assert python_calls(lambda: sess.run(None, {"x": x})) <= 5
            assert stats("testcpu")["run_steps"] - before["run_steps"] == 2  # one each
            np.testing.assert_allclose(net.run({"x": x})["y"], reference(model, {"x": x})[0],
                                       rtol=1e-6)


def test_outputs_never_alias_the_feeds_or_the_constants(libs):
    model = chain(2, passthrough=True, const_out=True)
    x = _x()
    want = reference(model, {"x": x})
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            assert net._host_path is not None
            for _ in range(2):
                got = net.run({"x": x})
                for name, w in zip(("y", "x", "c"), want):
                    np.testing.assert_array_equal(got[name], w)
                assert not np.shares_memory(got["x"], x)
                got["c"][...] = 7  # the caller's to write: the next run is not changed
                t = net.run_tensors({"x": x}, ["x"])["x"]
                assert not np.shares_memory(t.numpy(), x)


def test_only_outputs_the_partition_makes_skip_the_checks(libs):
    """A static partition whose every output one of its kernels makes hands back arrays the
    host allocated for the run, of the model's shapes: where every model output is one of
    those, the host path checks neither their shapes nor their aliasing. A model output that
    is an input or a constant is still copied."""
    x = _x()
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        for model, fresh in ((chain(2), True), (chain(2, passthrough=True), False),
                             (chain(2, const_out=True), False)):
            with rt.load(model) as net:
                assert [s.fresh_arrays for s in net._steps] == [True]
                assert net._host_path.all_fresh is fresh
                first, second = net.run({"x": x}), net.run({"x": x})
                for name, want in zip([o.name for o in net.outputs], reference(model, {"x": x})):
                    np.testing.assert_array_equal(first[name], want)
                    assert not np.shares_memory(first[name], second[name])
                    assert not np.shares_memory(first[name], x)


def test_feed_errors_read_as_on_the_general_path(libs):
    model = chain(2)
    x = _x()
    bad_feeds = [{"x": x.astype(np.float64)}, {"x": x[:1]}, {"x": x[None]}, {},
                 {"x": x, "z": x}, [x]]
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for feeds in bad_feeds:
                with pytest.raises(nnplug.NnplugError) as general:
                    check_feeds(feeds, net._input_table)
                with pytest.raises(type(general.value)) as got:
                    net.run(feeds)
                assert str(got.value) == str(general.value)
            with pytest.raises(nnplug.InputError, match="unknown output name"):
                net.run({"x": x}, ["nope"])
            assert list(net.run({"x": x}, (n for n in ["y"]))) == ["y"]  # any iterable
            # what the general path accepts, the short one leaves to it: same answers
            want = net.run({"x": x})["y"]
            for feeds in ({"x": np.asfortranarray(x)}, {"x": x.tolist()}, {"x": x[::1, ::1]}):
                np.testing.assert_array_equal(net.run(feeds)["y"], want)
            ro = x.copy()
            ro.flags.writeable = False
            np.testing.assert_array_equal(net.run({"x": ro})["y"], want)


def test_a_closed_network_says_so(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        net = rt.load(chain(1))
        assert net._host_path is not None
        net.run({"x": _x()})
        net.close()
        for run in (net.run, net.run_tensors):
            with pytest.raises(nnplug.NnplugError, match="this Network is closed"):
                run({"x": _x()})


def test_a_failing_kernel_names_its_node_on_every_run(libs):
    node = helper.make_node("TbFail", ["x"], ["y"], name="the_failing_node", domain="test.nnplug")
    g = helper.make_graph([node], "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                                helper.make_opsetid("test.nnplug", 1)])
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            assert net._host_path is not None
            msgs = []

            def work():  # on a thread of its own: the backend's last error is per thread, and
                for _ in range(2):  # another test wants none on the main thread
                    try:
                        net.run({"x": np.ones(2, np.float32)})
                    except nnplug.BackendError as e:
                        msgs.append(str(e))

            t = threading.Thread(target=work)
            t.start()
            t.join()
    assert len(msgs) == 2
    for msg in msgs:
        assert "TbFail node the_failing_node refuses to run" in msg
        assert "node 'the_failing_node'" in msg and "testcpu" in msg


def test_a_run_context_still_runs_kernel_by_kernel(libs, stats):
    model = chain(3)
    x = _x()
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            before = stats("testcpu")
            with running(RunContext(terminated=lambda: False)):
                y = net.run({"x": x})["y"]
            after = stats("testcpu")
    assert after["run_steps"] == before["run_steps"]  # the kernels one by one instead
    assert after["kernel_run"] > before["kernel_run"]
    np.testing.assert_allclose(y, reference(model, {"x": x})[0], rtol=1e-6)


def test_eight_threads_on_one_network_get_their_own_answers(libs):
    model = chain(4, passthrough=True)
    xs = [_x(seed=s) for s in range(8)]
    want = [reference(model, {"x": x}) for x in xs]
    barrier = threading.Barrier(8)
    errors = []
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            assert net._host_path is not None

            def work(i):
                try:
                    barrier.wait()
                    for _ in range(200):
                        got = net.run({"x": xs[i]})
                        np.testing.assert_array_equal(got["y"], want[i][0])
                        assert not np.shares_memory(got["x"], xs[i])
                except BaseException as e:  # noqa: BLE001 - reported below
                    errors.append(e)

            threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
    assert not errors, errors


def test_any_value_name_runs_and_never_enters_the_runs_source(libs):
    """The host path's run is Python written for the plan; the model's names (here quotes,
    newlines, braces and code) are bound to it as values, never written into it."""
    names = ['x"\n', "y'); import os  #", "{c}", "a\\n"]
    x_name, y_name, c_name, a_name = names
    c = numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32).reshape(2, 4), c_name)
    g = helper.make_graph(
        [helper.make_node("Add", [x_name, c_name], [a_name], name="add"),
         helper.make_node("Relu", [a_name], [y_name], name="relu")], "odd names",
        [helper.make_tensor_value_info(x_name, TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info(y_name, TensorProto.FLOAT, ["N", 4]),
         helper.make_tensor_value_info(x_name, TensorProto.FLOAT, ["N", 4])], [c])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            source = net._host_path.source
            assert not [n for n in names if n in source]
            got = net.run({x_name: x})
            np.testing.assert_array_equal(got[y_name], reference(model, {x_name: x})[0])
            np.testing.assert_array_equal(got[x_name], x)
            assert not np.shares_memory(got[x_name], x)
            assert list(net.run({x_name: x}, [x_name, y_name])) == [x_name, y_name]


def test_a_symbol_shared_by_two_feeds_must_have_one_size(libs, stats):
    g = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"], name="add")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4]),
                           helper.make_tensor_value_info("z", TensorProto.FLOAT, ["B", 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with bare_runtime() as rt:
        rt.register_backend(libs["testcpu"])
        with rt.load(model) as net:
            for b in (1, 3):
                x = np.full((b, 4), 2, np.float32)
                before = stats("testcpu")["run_steps"]
                np.testing.assert_array_equal(net.run({"x": x, "z": x})["y"], x + x)
                np.testing.assert_array_equal(net.run({"x": x, "z": x})["y"], x + x)
                assert stats("testcpu")["run_steps"] - before >= 1  # the host path ran it
            with pytest.raises(nnplug.InputError, match="'B'.*is 2.*is 1 in input 'x'"):
                net.run({"x": np.ones((1, 4), np.float32), "z": np.ones((2, 4), np.float32)})
            with pytest.raises(nnplug.InputError, match="input 'z'"):
                net.run({"x": np.ones((1, 4), np.float32), "z": np.ones((1, 5), np.float32)})
