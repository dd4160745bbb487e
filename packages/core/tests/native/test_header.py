"""The headers compile on their own (C and C++, strict warnings) and the ctypes mirror has the
same layout as the C structs, field by field."""

import ctypes
import os
import subprocess

import pytest
from nativelib import compiler

import nnplug
from nnplug.native import abi

C_NAMES = {
    abi.Version: "nnp_version", abi.Device: "nnp_device", abi.DType: "nnp_dtype",
    abi.Tensor: "nnp_tensor", abi.Attr: "nnp_attr", abi.ValueDesc: "nnp_value_desc",
    abi.NodeDesc: "nnp_node_desc", abi.InitOptions: "nnp_init_options",
    abi.AttrValue: "nnp_attr_value", abi.Step: "nnp_step", abi.BackendV1: "nnp_backend_v1",
    abi.ProfileEvent: "nnp_profile_event", abi.String: "nnp_string",
    abi.DynamicStep: "nnp_dynamic_step", abi.DynamicPlan: "nnp_dynamic_plan",
    abi.DynamicRun: "nnp_dynamic_run",
}


def test_get_include_points_at_the_headers():
    inc = nnplug.get_include()
    assert inc == nnplug.native.get_include()
    for h in ("backend.h", "common.h"):
        assert os.path.isfile(os.path.join(inc, "nnplug", h))


@pytest.mark.parametrize("lang", ["c", "c++"])
def test_headers_compile_standalone_with_strict_warnings(tmp_path, lang):
    src = tmp_path / ("t.c" if lang == "c" else "t.cpp")
    src.write_text('#include <nnplug/backend.h>\n#include <nnplug/common.h>\n'
                   "int main(void) { return (int)(sizeof(nnp_backend_v1) == 0); }\n")
    std = "-std=c99" if lang == "c" else "-std=c++11"
    subprocess.run([compiler(lang == "c++"), std, "-Wall", "-Wextra", "-pedantic", "-Werror",
                    f"-I{nnplug.get_include()}", str(src), "-o", str(tmp_path / "t")],
                   check=True, capture_output=True)
    assert subprocess.run([str(tmp_path / "t")]).returncode == 0


def test_ctypes_mirror_matches_c_layout(tmp_path):
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include <nnplug/backend.h>',
             "int main(void) {"]
    expected = []
    for cls, cname in C_NAMES.items():
        lines.append(f'printf("%zu\\n", sizeof({cname}));')
        expected.append(ctypes.sizeof(cls))
        for fname, *_ in cls._fields_:
            lines.append(f'printf("%zu\\n", offsetof({cname}, {fname}));')
            expected.append(getattr(cls, fname).offset)
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    subprocess.run([compiler(), f"-I{nnplug.get_include()}", str(src), "-o",
                    str(tmp_path / "layout")], check=True, capture_output=True)
    got = [int(x) for x in subprocess.run([str(tmp_path / "layout")], capture_output=True,
                                          text=True, check=True).stdout.split()]
    assert got == expected


def test_abi_version_macros_match_the_host(tmp_path):
    src = tmp_path / "v.c"
    src.write_text('#include <stdio.h>\n#include <nnplug/backend.h>\nint main(void){printf('
                   '"%d %d %d %s", NNP_BACKEND_ABI_MAJOR, NNP_BACKEND_ABI_MINOR, '
                   'NNP_BACKEND_ABI_PATCH, NNP_BACKEND_ENTRY_SYMBOL); return 0;}\n')
    subprocess.run([compiler(), f"-I{nnplug.get_include()}", str(src), "-o", str(tmp_path / "v")],
                   check=True)
    out = subprocess.run([str(tmp_path / "v")], capture_output=True, text=True).stdout.split()
    assert tuple(map(int, out[:3])) == abi.ABI_VERSION
    assert out[3] == abi.ENTRY_SYMBOL


def test_reserved_ids_match_the_header():
    text = open(os.path.join(nnplug.get_include(), "nnplug", "backend.h")).read()
    start = text.index("#define NNP_RESERVED_BACKEND_IDS")
    macro = text[start:text.index("\n", text.index("\\", start) + 2)]
    ids = {s.strip().strip('"') for s in macro.split("\\", 1)[1].split(",")}
    assert ids == set(abi.RESERVED_IDS)
