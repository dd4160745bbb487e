"""The plan cache: a second load of the same model on the same plugins and options goes from
the entry straight to the compile stage (no backend is asked ``supports``, the model's weights
are not copied, its constants are the entry's own pages), gives the same answers, and a
changed model, other options or a damaged entry never give a stale or wrong one."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest
from numpy_backend import KERNELS, CountingBackend, NumpyBackend, make_runtime
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import nnplug
from nnplug import plan_cache
from nnplug.plan_cache import SUFFIX

RNG = np.random.default_rng(7)


def _model(w: np.ndarray) -> onnx.ModelProto:
    """A weight large enough to be read lazily, a function-bodied op (HardSigmoid: expanded),
    a foldable constant subgraph (Mul of two initializers) and an If run by the core."""
    then_g = h.make_graph([h.make_node("Relu", ["hs"], ["t"], name="then_relu")], "then", [],
                          [h.make_tensor_value_info("t", T.FLOAT, [2, 96])])
    else_g = h.make_graph([h.make_node("Mul", ["hs", "xw"], ["e"], name="else_mul")], "else",
                          [], [h.make_tensor_value_info("e", T.FLOAT, [2, 96])])
    nodes = [h.make_node("Mul", ["two", "W"], ["W2"], name="fold_me"),
             h.make_node("MatMul", ["x", "W2"], ["xw"], name="mm"),
             h.make_node("HardSigmoid", ["xw"], ["hs"], name="act", alpha=0.3, beta=0.4),
             h.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                         else_branch=else_g)]
    g = h.make_graph(nodes, "cached",
                     [h.make_tensor_value_info("x", T.FLOAT, [2, 64]),
                      h.make_tensor_value_info("c", T.BOOL, [])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 96])],
                     [numpy_helper.from_array(w, "W"),
                      numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return h.make_model(g, opset_imports=[h.make_opsetid("", 18)])


def _expected(w, x, c):
    xw = x @ (2 * w)
    hs = np.clip(0.3 * xw + 0.4, 0, 1)
    return np.maximum(hs, 0) if c else hs * xw


def _weights():
    return RNG.standard_normal((64, 96)).astype(np.float32)


def _backend():
    return CountingBackend(ops=set(KERNELS) - {"HardSigmoid"})


def _check(net, w):
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    for c in (True, False):
        got = net.run({"x": x, "c": np.array(c)})["y"]
        np.testing.assert_allclose(got, _expected(w, x, c), rtol=1e-5, atol=1e-5)


def _entries(folder) -> list[str]:
    return sorted(f for f in os.listdir(folder) if f.endswith(SUFFIX))


@pytest.fixture
def saved(tmp_path):
    """(model path, cache folder, weights): the model saved with fresh random weights."""
    w = _weights()
    path = tmp_path / "m.onnx"
    onnx.save(_model(w), path)
    return path, tmp_path / "cache", w


def test_a_second_load_asks_no_backend_and_copies_no_weight(saved, monkeypatch):
    path, folder, w = saved
    backend = _backend()
    with make_runtime(backend) as rt:
        first = rt.load(str(path), plan_cache=str(folder))
        _check(first, w)
        assert len(_entries(folder)) == 1
        assert backend.asked  # the first load placed the nodes
        backend.asked.clear()
        copies = []
        real_copy = nnplug.model_file.FileWeights._copy
        monkeypatch.setattr(nnplug.model_file.FileWeights, "_copy",
                            lambda self: copies.append(self.path) or real_copy(self))
        second = rt.load(str(path), plan_cache=str(folder))
        # placed as the entry says; only the If's branches are compiled again (sub-plans
        # are built with their step), and the If is placed on the core again
        assert set(backend.asked) == {"branch", "then_relu", "else_mul"}, backend.asked
        assert copies == []  # the weights came from the entry, not the model file
        assert second.assignment == first.assignment
        assert second.explain_placement() == first.explain_placement()
        _check(second, w)
        # the folded weight is a read-only view of the entry's mapping, 64-byte aligned
        folded = second.constants["W2"]
        assert not folded.flags.writeable and folded.ctypes.data % 64 == 0
        np.testing.assert_array_equal(folded, 2 * w)
        first.close()
        second.close()
        assert _entries(folder) == _entries(folder)  # nothing more was written


def test_a_model_file_written_again_is_loaded_again(saved):
    path, folder, w = saved
    with make_runtime(_backend()) as rt:
        _check(rt.load(str(path), plan_cache=str(folder)), w)
        new = _weights()  # same graph, same size, new weights: a new entry, new answers
        onnx.save(_model(new), path)
        _check(rt.load(str(path), plan_cache=str(folder)), new)
        assert len(_entries(folder)) == 2


def test_other_backends_or_options_get_entries_of_their_own(saved):
    path, folder, w = saved
    with make_runtime(_backend(), NumpyBackend(id="other")) as rt:
        for backends, optimization in [(["numpy"], "all"), (["other", "numpy"], "all"),
                                       (["numpy"], "disable")]:
            net = rt.load(str(path), backends=backends, optimization=optimization,
                          plan_cache=str(folder))
            _check(net, w)
        assert len(_entries(folder)) == 3
        again = rt.load(str(path), backends=["other", "numpy"], plan_cache=str(folder))
        assert "other" in again.assignment.values()
        assert len(_entries(folder)) == 3


def test_model_bytes_are_cached_by_their_contents(tmp_path):
    folder = tmp_path / "cache"
    w = _weights()
    data = _model(w).SerializeToString()
    backend = _backend()
    with make_runtime(backend) as rt:
        rt.load(data, plan_cache=str(folder))
        backend.asked.clear()
        _check(rt.load(data, plan_cache=str(folder)), w)
        assert "mm" not in backend.asked
        other = _weights()
        _check(rt.load(_model(other).SerializeToString(), plan_cache=str(folder)), other)
        assert len(_entries(folder)) == 2


def test_an_entry_others_may_write_is_not_read(saved, caplog):
    path, folder, w = saved
    backend = _backend()
    with make_runtime(backend) as rt:
        rt.load(str(path), plan_cache=str(folder)).close()
        entry = folder / _entries(folder)[0]
        assert entry.stat().st_mode & 0o077 == 0  # written for this user alone
        os.chmod(entry, 0o666)
        backend.asked.clear()
        with caplog.at_level(logging.WARNING, logger="nnplug"):
            _check(rt.load(str(path), plan_cache=str(folder)), w)
        assert "others may write it" in caplog.text and "mm" in backend.asked
        assert entry.stat().st_mode & 0o077 == 0  # written again, for this user


@pytest.mark.parametrize("damage", ["truncated", "garbage", "header only", "flipped meta",
                                    "empty"])
def test_a_damaged_entry_is_said_and_rebuilt(saved, damage, caplog):
    path, folder, w = saved
    backend = _backend()
    with make_runtime(backend) as rt:
        rt.load(str(path), plan_cache=str(folder)).close()
        entry = folder / _entries(folder)[0]
        data = entry.read_bytes()
        entry.write_bytes({"truncated": data[:len(data) - 100], "garbage": os.urandom(5000),
                           "header only": data[:56],
                           "flipped meta": data[:80] + bytes([data[80] ^ 0xFF]) + data[81:],
                           "empty": b""}[damage])
        backend.asked.clear()
        with caplog.at_level(logging.WARNING, logger="nnplug"):
            net = rt.load(str(path), plan_cache=str(folder))
        assert "cannot be used" in caplog.text and entry.name in caplog.text
        assert "mm" in backend.asked  # placed again, not from the damaged entry
        _check(net, w)
        assert entry.read_bytes() == data  # written again, whole
        backend.asked.clear()
        _check(rt.load(str(path), plan_cache=str(folder)), w)
        assert "mm" not in backend.asked


def test_an_entry_replaced_under_a_live_network_leaves_it_as_it_was(saved):
    path, folder, w = saved
    with make_runtime(_backend()) as rt:
        rt.load(str(path), plan_cache=str(folder)).close()
        live = rt.load(str(path), plan_cache=str(folder))  # maps the entry
        entry = folder / _entries(folder)[0]
        entry.unlink()  # removed, then written again by another load
        rt.load(str(path), plan_cache=str(folder)).close()
        assert entry.exists()
        _check(live, w)


def test_a_folder_that_cannot_be_written_is_said_and_the_load_goes_on(tmp_path, saved, caplog):
    path, _, w = saved
    blocker = tmp_path / "a file"
    blocker.write_text("not a folder")
    with make_runtime(_backend()) as rt, caplog.at_level(logging.WARNING, logger="nnplug"):
        _check(rt.load(str(path), plan_cache=str(blocker / "cache")), w)
    assert "cannot write the plan cache entry" in caplog.text


def test_custom_ops_are_bound_again_on_a_hit(tmp_path):
    class Scale:
        op_type = "cstScale"

        def shape_infer(self, node, in_shapes, in_dtypes):
            return [in_shapes[0]], [in_dtypes[0]]

        def compute(self, node, inputs):
            return [inputs[0] * np.float32(3)]

    nodes = [h.make_node("Relu", ["x"], ["r"], name="relu"),
             h.make_node("cstScale", ["r"], ["y"], name="custom", domain="my.ops")]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [2, 5])],
                     [h.make_tensor_value_info("y", T.FLOAT, [2, 5])])
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 18), h.make_opsetid("my.ops", 1)])
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = RNG.standard_normal((2, 5)).astype(np.float32)
    with make_runtime(NumpyBackend()) as rt:
        rt.register_custom_op(Scale())
        for _ in range(2):
            net = rt.load(str(path), plan_cache=str(tmp_path / "cache"))
            assert net.assignment == {"relu": "numpy", "custom": "op:cstScale@cpu"}
            np.testing.assert_allclose(net.run({"x": x})["y"], 3 * np.maximum(x, 0))
    assert len(_entries(tmp_path / "cache")) == 1


def test_the_session_config_entry_and_the_environment_turn_it_on(tmp_path, saved, monkeypatch):
    path, _, w = saved
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    with make_runtime(_backend()) as rt:
        monkeypatch.delenv(plan_cache.ENV_VAR, raising=False)
        nnplug.InferenceSession(str(path), runtime=rt)
        so = nnplug.SessionOptions()
        so.add_session_config_entry(plan_cache.CONFIG_KEY, str(tmp_path / "by-option"))
        for _ in range(2):
            got = nnplug.InferenceSession(str(path), so, runtime=rt).run(
                None, {"x": x, "c": np.array(True)})[0]
            np.testing.assert_allclose(got, _expected(w, x, True), rtol=1e-5, atol=1e-5)
        assert len(_entries(tmp_path / "by-option")) == 1
        monkeypatch.setenv(plan_cache.CACHE_ENV_VAR, str(tmp_path / "root"))
        monkeypatch.setenv(plan_cache.ENV_VAR, "1")
        nnplug.InferenceSession(str(path), runtime=rt)
        assert len(_entries(tmp_path / "root" / "plans")) == 1
        monkeypatch.setenv(plan_cache.ENV_VAR, str(tmp_path / "by-env"))
        nnplug.InferenceSession(str(path), runtime=rt)
        assert len(_entries(tmp_path / "by-env")) == 1
        so.add_session_config_entry(plan_cache.CONFIG_KEY, "")  # off for this session
        nnplug.InferenceSession(str(path), so, runtime=rt)
        assert len(_entries(tmp_path / "by-env")) == 1
    assert not (tmp_path / "cache").exists()  # nothing written where it was not asked


def test_what_the_stages_warned_about_is_said_again_on_a_hit(tmp_path):
    # an output typed without a shape: the ONNX checker refuses it, onnxruntime and nnplug
    # load it with a warning (nnplug.checking)
    path = tmp_path / "m.onnx"
    w = _weights()
    model = _model(w)
    model.graph.output[0].CopyFrom(h.make_tensor_value_info("y", T.FLOAT, None))
    onnx.save(model, path)
    with make_runtime(_backend()) as rt:
        with pytest.warns(nnplug.ModelWarning) as first:
            rt.load(str(path), plan_cache=str(tmp_path / "cache"))
        with pytest.warns(nnplug.ModelWarning) as second:
            _check(rt.load(str(path), plan_cache=str(tmp_path / "cache")), w)
    said = sorted((type(w.message).__name__, str(w.message)) for w in first)
    assert said and sorted((type(w.message).__name__, str(w.message)) for w in second) == said


def test_constants_of_every_kind_read_back_as_they_were(tmp_path):
    # large plain arrays are mapped back; strings, ml_dtypes' types and small arrays are
    # pickled (a bfloat16 array's dtype.str is "<V2": mapped back it would be raw bytes)
    ml_dtypes = pytest.importorskip("ml_dtypes")
    from nnplug.from_onnx import model_from_proto
    from nnplug.plan_cache import Decided, _read_entry, _write_entry

    model = model_from_proto(_model(_weights()))
    rng = np.random.default_rng(3)
    constants = {
        "f32": rng.standard_normal((64, 96)).astype(np.float32),
        "i64": np.arange(5000, dtype=np.int64).reshape(50, 100),
        "bool": rng.random((70, 70)) > 0.5,
        "bf16": rng.standard_normal((64, 96)).astype(ml_dtypes.bfloat16),
        "f8": rng.standard_normal(300).astype(ml_dtypes.float8_e4m3fn),
        "strings": np.array(["a", "bb", ""], dtype=object),
        "scalar": np.array(2.0, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }
    decided = Decided(model, model, [], {}, constants, {}, {}, {})
    path = str(tmp_path / "entry.nnplan")
    _write_entry(path, "k", decided)
    got = _read_entry(path, "k").constants
    assert set(got) == set(constants)
    for name, want in constants.items():
        assert got[name].dtype == want.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(got[name], want, err_msg=name)
        assert not got[name].flags.writeable, name


def test_an_array_kept_under_two_names_is_written_once(tmp_path):
    """Identity of a weight folds to that same array (a torch export has one per shared
    weight): the entry holds its bytes once, and both names read them back."""
    from nnplug.from_onnx import model_from_proto
    from nnplug.plan_cache import Decided, _read_entry, _write_entry

    model = model_from_proto(_model(_weights()))
    w = np.random.default_rng(4).standard_normal((256, 256)).astype(np.float32)
    other = w.copy()
    path = str(tmp_path / "entry.nnplan")
    _write_entry(path, "k", Decided(model, model, [], {}, {"w": w, "w_id": w}, {}, {}, {}))
    shared = os.path.getsize(path)
    _write_entry(path, "k", Decided(model, model, [], {}, {"w": w, "w_copy": other}, {}, {}, {}))
    assert os.path.getsize(path) - shared >= w.nbytes  # equal bytes in two arrays: two copies
    _write_entry(path, "k", Decided(model, model, [], {}, {"w": w, "w_id": w}, {}, {}, {}))
    got = _read_entry(path, "k").constants
    np.testing.assert_array_equal(got["w"], w)
    np.testing.assert_array_equal(got["w_id"], w)
