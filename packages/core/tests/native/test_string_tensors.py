"""String tensors across the backend ABI (1.3): packed for a kernel, copied back and released,
offered only to backends that can take them, and checked when a backend hands back bad text.
With a symbolic shape a string node's partition runs in the backend's one run_dynamic call
(ABI 1.7; a 1.6 backend's kernel by kernel), with the same answers, releases and errors."""

import numpy as np
import pytest
from nativelib import bare_runtime, guarded_page
from onnx import TensorProto, helper

import nnplug

ort = pytest.importorskip("onnxruntime")

TEXT = np.array([["", "plain", "naïve café"], ["的中", "a\0b", "emoji 🙂"]], dtype=object)


def identity_then_add(shape=(2, 3)):
    """y = Identity(s) on strings; z = Add(a, a) on floats (a node every variant runs)."""
    nodes = [helper.make_node("Identity", ["s"], ["y"], name="copy_strings"),
             helper.make_node("Add", ["a", "a"], ["z"], name="add")]
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("s", TensorProto.STRING, list(shape)),
         helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", TensorProto.STRING, list(shape)),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def floats_only():
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "a"], ["z"], name="add")], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _feeds(text=TEXT):
    return {"s": text, "a": np.arange(3, dtype=np.float32)}


@pytest.mark.parametrize("text", [TEXT, np.empty((0, 3), object)], ids=["text", "empty"])
def test_strings_round_trip_as_onnxruntime_returns_them(libs, stats, text):
    model = identity_then_add(text.shape)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, _feeds(text))
    with bare_runtime() as rt:
        rt.register_backend(libs["strings"])
        with rt.load(model) as net:
            got = net.run(_feeds(text))
    assert got["y"].dtype == want[0].dtype == object
    assert got["y"].shape == want[0].shape
    assert got["y"].tolist() == want[0].tolist()
    assert all(type(v) is str for v in got["y"].flat)
    np.testing.assert_array_equal(got["z"], want[1])
    assert stats("strings")["strings_live"] == 0  # every output byte handed back


def test_str_arrays_are_taken_as_strings(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["strings"])
        with rt.load(identity_then_add((2,))) as net:
            got = net.run({"s": np.array(["ab", "ç"]), "a": np.zeros(3, np.float32)})
    assert got["y"].dtype == object and got["y"].tolist() == ["ab", "ç"]


@pytest.mark.parametrize("variant", ["strings_norelease", "strings_abi12", "strings_device"])
def test_backends_that_cannot_take_strings_are_never_offered_string_nodes(libs, variant):
    """No release_strings entry, an ABI 1.2 table (whose struct still holds a pointer there),
    or device memory: the string node is declined, the float node still runs."""
    with bare_runtime() as rt:
        b = rt.register_backend(libs[variant]).backend
        if variant == "strings_abi12":
            assert b.abi_version[:2] == (1, 2)
            assert not b.library.table.release_strings  # a 1.2 table is read by its minor
        with pytest.raises(nnplug.UnsupportedNodeError, match="copy_strings"):
            rt.load(identity_then_add())
        with rt.load(floats_only()) as net:
            np.testing.assert_array_equal(net.run({"a": np.ones(3, np.float32)})["z"], 2)


def test_a_string_output_that_is_not_utf8_fails_naming_the_node(libs, stats):
    with bare_runtime() as rt:
        rt.register_backend(libs["strings_bad"])
        with rt.load(identity_then_add()) as net:
            with pytest.raises(nnplug.BackendError, match="copy_strings.*not UTF-8"):
                net.run(_feeds())
    assert stats("strings_bad")["strings_live"] == 0  # released although the text was bad


def test_elements_that_are_not_strings_are_refused(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["strings"])
        with rt.load(identity_then_add((2,))) as net:
            with pytest.raises(nnplug.InputError, match="'s'"):
                net.run({"s": np.array(["a", 3], dtype=object), "a": np.zeros(3, np.float32)})


def test_many_string_outputs_are_read_in_one_pass_and_an_unreadable_one_is_named():
    """Thousands of elements (more than one process_vm_readv takes) come back in order, empty
    ones included; an element reaching into unreadable memory still fails naming it, and the
    backend's bytes are released either way."""
    from nnplug.errors import BackendError
    from nnplug.native import string_tensors, strings

    base, page = guarded_page(b"x")
    n = 2500
    items = string_tensors.output_items((n,))
    sizes = [i % 7 for i in range(n)]
    items["data"] = [base + (i % 97) if s else 0 for i, s in enumerate(sizes)]
    items["size"] = sizes
    released = []
    out = string_tensors.unpack(items, (n,), lambda a, k: released.append(k), "test")
    assert out.tolist() == ["x" * s for s in sizes] and released == [n]
    assert strings.read_gathered(items.ctypes.data, sizes) == b"x" * sum(sizes)

    items["data"][1800], items["size"][1800] = base + page - 2, 4  # 2 bytes past the page
    assert strings.read_gathered(items.ctypes.data, items["size"].tolist()) is None
    with pytest.raises(BackendError, match="string output element 1800 points to unreadable"):
        string_tensors.unpack(items, (n,), lambda a, k: released.append(k), "test")
    assert released == [n, n]


@pytest.mark.parametrize("variant,calls", [("strings", 1), ("strings_abi16", 0)])
def test_a_symbolic_string_partition_runs_in_run_dynamic_from_abi_1_7(libs, stats, variant,
                                                                    calls):
    model = identity_then_add(("N", 3))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with bare_runtime() as rt:
        rt.register_backend(libs[variant])
        with rt.load(model) as net:
            for text in (TEXT, TEXT[:1], np.empty((0, 3), object), TEXT):
                before = stats(variant)
                got = net.run(_feeds(text))
                after = stats(variant)
                assert after["run_dynamic"] - before["run_dynamic"] == calls
                assert got["y"].dtype == object and got["y"].shape == text.shape
                assert got["y"].tolist() == sess.run(None, _feeds(text))[0].tolist()
                assert all(type(v) is str for v in got["y"].flat)
                np.testing.assert_array_equal(got["z"], 2 * np.arange(3, dtype=np.float32))
    assert stats(variant)["strings_live"] == 0  # every output byte handed back


def test_bad_text_from_a_run_dynamic_call_fails_naming_the_node_and_is_released(libs, stats):
    with bare_runtime() as rt:
        rt.register_backend(libs["strings_bad"])
        with rt.load(identity_then_add(("N", 3))) as net:
            before = stats("strings_bad")["run_dynamic"]
            with pytest.raises(nnplug.BackendError, match="copy_strings.*not UTF-8"):
                net.run(_feeds())
            assert stats("strings_bad")["run_dynamic"] == before + 1
    assert stats("strings_bad")["strings_live"] == 0  # released although the text was bad
