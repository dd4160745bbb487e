"""What a native backend's table declares beyond its entries: Target attributes (ABI 1.2
``target_attrs``, handed to ``kernel_create_for_target`` as the network's Target), read only from tables whose version and size carry them (a library built
against the 1.1 header keeps loading), its version (``BackendInfo.version``), and its
extension device type, where two plugins that clash are a load error naming both."""

import json
import os
import re
import subprocess

import numpy as np
import pytest
from nativelib import CSRC, bare_runtime, compile_backend, compiler
from onnx import TensorProto, helper

import nnplug
from nnplug.native import LibraryLoadError, abi

ATTRS = {"max_num_threads": {"type": "int", "default": 256},
         "fast_math": {"type": "bool", "default": False},
         "scale": {"type": "float", "default": 1},
         "layout": {"type": "str", "default": "nchw"}}


def _attrs_flag(decl) -> str:
    text = decl if isinstance(decl, str) else json.dumps(decl)
    return "-DTB_TARGET_ATTRS=" + json.dumps(text)  # a C string literal


def _cpu(tmp_path, ident, *flags):
    out = tmp_path / f"libnnplug_{ident}.so"
    return compile_backend("testbackend.c", str(out),
                           ["-DTB_HOST_VISIBLE=1", f'-DTB_ID="{ident}"', *flags])


def _relu_model():
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# -- Target attributes ---------------------------------------------------------------------------
def test_declared_attributes_are_typed_target_attributes(tmp_path):
    lib = _cpu(tmp_path, "tattrs", _attrs_flag(ATTRS))
    with bare_runtime() as rt:
        info = rt.register_backend(lib)
        assert info.backend.abi_version[:2] == abi.ABI_VERSION[:2]  # built against the current header
        t = nnplug.Target("tattrs")
        assert {k: t.attrs[k] for k in ATTRS} == {"max_num_threads": 256, "fast_math": False,
                                                  "scale": 1.0, "layout": "nchw"}
        t = nnplug.Target('{"kind": "tattrs", "max_num_threads": 8, "scale": 0.5}')
        assert (t.attrs["max_num_threads"], t.attrs["scale"]) == (8, 0.5)
        with pytest.raises(nnplug.TargetError, match="'fast_math' must be bool, got int"):
            nnplug.Target('{"kind": "tattrs", "fast_math": 1}')
        with pytest.raises(nnplug.TargetError, match="no attribute.*warp"):
            nnplug.Target('{"kind": "tattrs", "warp": 32}')
        # a network loads for such a target, and runs
        with rt.load(_relu_model(), targets={"tattrs": {"kind": "tattrs", "fast_math": True}}) as net:
            x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
            np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))


def test_kernels_are_created_for_the_networks_target(tmp_path):
    import ctypes

    lib = _cpu(tmp_path, "tfor", _attrs_flag(ATTRS), "-DTB_FOR_TARGET=1")
    last = ctypes.CDLL(lib).tb_last_target  # same mapping as the host's: shared state
    last.restype = ctypes.c_char_p
    with bare_runtime() as rt:
        rt.register_backend(lib)
        with rt.load(_relu_model(), backends=["tfor"]):
            assert json.loads(last()) == nnplug.Target("tfor").export()
        target = nnplug.Target('{"kind": "tfor", "max_num_threads": 8, "fast_math": true}')
        with rt.load(_relu_model(), targets={"tfor": target}) as net:
            got = last().decode()
            assert got == str(target), got  # the JSON text, keys sorted, every attribute
            assert json.loads(got)["max_num_threads"] == 8 and json.loads(got)["fast_math"] is True
            x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
            np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))


@pytest.mark.parametrize("decl, reason", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object, not list"),
    ({"n": {"type": "int"}}, "give {\"type\": ..., \"default\": ...}"),
    ({"n": {"type": "complex", "default": 1}}, "type 'complex' is not one of"),
    ({"n": {"type": "int", "default": True}}, "default True is not of type int"),
    ({"n": {"type": "int", "default": 1.5}}, "default 1.5 is not of type int"),
    ({"device_id": {"type": "int", "default": 0}}, "every target kind already has"),
    ({"Bad Name": {"type": "int", "default": 0}}, "a name is"),
])
def test_a_bad_declaration_fails_the_load_naming_what_is_wrong(tmp_path, decl, reason):
    lib = _cpu(tmp_path, "tbad", _attrs_flag(decl))
    with bare_runtime() as rt, pytest.raises(LibraryLoadError) as e:
        rt.register_backend(lib)
    assert e.value.stage == "invalid table"
    assert reason in e.value.reason and "target_attrs" in e.value.reason, e.value.reason
    assert "NNP_MAX_TARGET_ATTRS_BYTES" in e.value.fix
    assert "tbad" not in nnplug.list_target_kinds()


def test_a_1_1_table_is_not_read_past_its_members(tmp_path):
    # claims ABI 1.1 although its (full-size) table has the 1.2 member set: the host must not
    # read it; and a 1.2 table whose struct_size stops before the member: not read either
    old = _cpu(tmp_path, "tminor", "-DTB_ABI_MINOR=1", _attrs_flag(ATTRS))
    short = _cpu(tmp_path, "tshort", _attrs_flag(ATTRS),
                 "-DTB_STRUCT_SIZE=offsetof(nnp_backend_v1,target_attrs)")
    with bare_runtime() as rt:
        for lib, ident in ((old, "tminor"), (short, "tshort")):
            info = rt.register_backend(lib)
            assert info.backend.library.target_attrs == {}
            assert set(nnplug.Target(ident).attrs) == {"device_id", "keys", "tag"}


def test_a_library_built_against_the_1_1_header_loads_and_runs(tmp_path):
    # the Relu backend of docs/dynamic-backends.md, compiled against a copy of the 1.1 header
    doc = os.path.join(os.path.dirname(__file__), *[".."] * 4, "docs", "dynamic-backends.md")
    if not os.path.isfile(doc):
        pytest.skip("docs/ is not next to the tests (installed copy)")
    blocks = re.findall(r"```c\n(.*?)```", open(doc).read(), re.S)
    src = tmp_path / "relu.c"
    src.write_text(next(b for b in blocks if "nnp_backend_entry" in b))
    lib = tmp_path / "libnnplug_relu_demo.so"
    subprocess.run([compiler(), "-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
                    "-Wextra", "-Werror", f"-I{os.path.join(CSRC, 'abi11')}",
                    f"-I{nnplug.get_include()}", str(src), "-o", str(lib)],
                   check=True, capture_output=True, text=True)
    with bare_runtime() as rt:
        info = rt.register_backend(str(lib))
        assert info.backend.abi_version == (1, 1, 0)
        assert info.backend.library.struct_size < nnplug.native.abi.BackendV1.target_attrs.offset + 8
        assert info.backend.library.target_attrs == {}
        assert info.version == "0.1.0"  # from the table
        with rt.load(_relu_model(), backends=["relu_demo"]) as net:
            x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
            np.testing.assert_array_equal(net.run({"x": x})["y"], np.maximum(x, 0))


def test_backend_info_version_is_the_tables(tmp_path, libs):
    with bare_runtime() as rt:
        assert rt.register_backend(libs["testcpu"]).version == "0.1.0"
    folder = tmp_path / "b"
    folder.mkdir()
    os.symlink(libs["testcpu"], folder / "libnnplug_testcpu.so")
    with bare_runtime(dynamic_backends_path=str(folder)) as rt:
        assert rt.backends["testcpu"].origin == "dynamic"
        assert rt.backends["testcpu"].version == "0.1.0"


# -- extension device types ----------------------------------------------------------------------
def _ext(tmp_path, ident, number, name):
    d = tmp_path / ident
    d.mkdir()
    named = f'-DTB_DEVICE_NAME="{name}"' if name else "-DTB_DEVICE_NAME=NULL"
    return compile_backend("testbackend.c", str(d / f"libnnplug_{ident}.so"),
                           [f'-DTB_ID="{ident}"', f"-DTB_DEVICE_TYPE={number}", named])


def test_two_plugins_claiming_one_device_type_number_is_a_load_error_naming_both(tmp_path):
    first = _ext(tmp_path, "clasha", 201, "clashnpua")
    other_name = _ext(tmp_path, "clashb", 201, "clashnpub")    # same number, another device
    other_number = _ext(tmp_path, "clashc", 202, "clashnpua")  # same device, another number
    same_device = _ext(tmp_path, "clashd", 201, "clashnpua")   # same pair: the same device
    with bare_runtime() as rt:
        rt.register_backend(first)
        for lib, held in ((other_name, "number 201 already belongs to 'clashnpua'"),
                          (other_number, "'clashnpua' is already number 201")):
            with pytest.raises(LibraryLoadError) as e:
                rt.register_backend(lib)
            assert e.value.stage == "device type clash", e.value
            assert held in e.value.reason and f"registered by {first}" in e.value.reason, e.value
            assert "docs/dynamic-backends.md" in e.value.fix
        assert rt.register_backend(same_device).device_type == "clashnpua"
        assert set(rt.backends) == {"clasha", "clashd"}


def test_a_clash_found_in_a_folder_is_a_recorded_load_error(tmp_path):
    folder = tmp_path / "all"
    folder.mkdir()
    for ident, number, name in (("fclasha", 211, "fclashx"), ("fclashb", 211, "fclashy")):
        os.symlink(_ext(tmp_path, ident, number, name), folder / f"libnnplug_{ident}.so")
    with bare_runtime(dynamic_backends_path=str(folder)) as rt:
        assert list(rt.backends) == ["fclasha"]
        (err,) = rt.load_errors
        assert err.stage == "device type clash" and "fclashb" in err.source
        assert "libnnplug_fclasha.so" in err.reason and "'fclashx'" in err.reason


@pytest.mark.parametrize("number, name, reason", [
    (221, None, "extension type (>= 64) and device_type_name is NULL"),
    (40, "fortyish", "not a DLPack type"),
    (4, "notopencl", "names are for extension types"),
])
def test_device_type_rules(tmp_path, number, name, reason):
    lib = _ext(tmp_path, f"dtrule{number}", number, name)
    with bare_runtime() as rt, pytest.raises(LibraryLoadError) as e:
        rt.register_backend(lib)
    assert e.value.stage == "invalid table" and reason in e.value.reason, e.value
