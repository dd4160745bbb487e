"""Finding and loading native backend libraries: search path rules, candidate files, every
load stage's failure (a WARNING, a load error with its fix, the next file still loads)."""

import logging
import os
import shutil

import pytest
from nativelib import bare_runtime

from nnplug import plugins
from nnplug.native import (
    ENV_VAR,
    LibraryLoadError,
    abi,
    backend_search_dirs,
    default_backend_dir,
    find_backend_libraries,
    load_backend_library,
)
from nnplug.native.loader import lease_key

# -- search path -------------------------------------------------------------------------------


def test_option_string_is_split_on_colons_dropping_empty_and_duplicate_entries(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    dirs, errors = backend_search_dirs(f":::{a}::{b}:{a}:")
    assert dirs == [str(a), str(b)]
    assert errors == []


def test_option_list_keeps_order(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    assert backend_search_dirs([b, str(a), "", b]) == ([str(b), str(a)], [])


def test_only_colons_and_empty_override_give_no_folders(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert backend_search_dirs(":::") == ([], [])
    assert backend_search_dirs("") == ([], [])
    assert backend_search_dirs([]) == ([], [])


def test_relative_missing_and_non_folder_entries_each_get_their_own_error(tmp_path):
    f = tmp_path / "file.so"
    f.write_text("x")
    dirs, errors = backend_search_dirs(f"relative/dir:{tmp_path}/missing:{f}:{tmp_path}")
    assert dirs == [str(tmp_path)]
    assert [(e.stage, e.reason) for e in errors] == [
        ("path", "relative path ignored"), ("path", "no such folder"), ("path", "not a folder")]
    assert "relative/dir" in errors[0].source and "absolute" in errors[0].fix
    assert "missing" in errors[1].source
    assert "file.so" in errors[2].source


def test_environment_variable_is_used_when_the_option_is_none(monkeypatch, tmp_path):
    monkeypatch.setenv(ENV_VAR, f"{tmp_path}:relative")
    dirs, errors = backend_search_dirs(None)
    assert dirs == [str(tmp_path)]
    assert errors[0].source.startswith(ENV_VAR)


def test_option_overrides_the_environment_variable(monkeypatch, tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert backend_search_dirs(str(a))[0] == [str(a)]


def test_default_is_the_backends_folder_of_the_installed_package(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    import nnplug

    d = default_backend_dir()
    assert d == os.path.join(os.path.dirname(nnplug.__file__), "backends")
    dirs, errors = backend_search_dirs(None)
    assert errors == []  # a missing default folder is normal, not a warning
    assert dirs == ([d] if os.path.isdir(d) else [])


def test_a_bad_option_type_is_refused():
    with pytest.raises(TypeError, match="dynamic_backends_path"):
        backend_search_dirs(42)


# -- candidate files -----------------------------------------------------------------------------


def test_candidates_are_so_files_sorted_deduplicated_by_real_path(tmp_path, libs):
    d = tmp_path / "d"
    d.mkdir()
    shutil.copy(libs["testdev"], d / "libz.so")
    shutil.copy(libs["testcpu"], d / "liba.so.1.2")
    (d / "libnot.so.x").write_text("")
    (d / "readme.txt").write_text("")
    (d / "libnot.sox").write_text("")
    os.symlink(d / "libz.so", d / "link1.so")           # chain: link2 -> link1 -> libz.so
    os.symlink(d / "link1.so", d / "link2.so")
    os.symlink(d / "gone.so", d / "dangling.so")
    (d / "y.so").mkdir()
    found, errors = find_backend_libraries([str(d)])
    assert found == [str(d / "liba.so.1.2"), str(d / "libz.so")]
    assert [(os.path.basename(e.source), e.stage) for e in errors] == [
        ("dangling.so", "file"), ("y.so", "file")]
    assert "dangling symbolic link" in errors[0].reason
    assert "not a regular file" in errors[1].reason


def test_the_same_file_in_two_folders_is_loaded_once(tmp_path, libs):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    shutil.copy(libs["testdev"], a / "libx.so")
    os.symlink(a / "libx.so", b / "liby.so")
    found, _ = find_backend_libraries([str(a), str(b)])
    assert found == [str(a / "libx.so")]


# -- each load stage -------------------------------------------------------------------------------


def _load_error(path) -> LibraryLoadError:
    with pytest.raises(LibraryLoadError) as info:
        load_backend_library(path)
    e = info.value
    assert str(path) in str(e) and e.stage in str(e)
    assert plugins.BACKENDS.count(lease_key(str(path))) == 0  # nothing left loaded
    return e


def test_text_file_named_so_is_not_loadable(tmp_path):
    p = tmp_path / "x.so"
    p.write_text("this is a text file that someone named x.so by mistake\n" * 4)
    e = _load_error(p)
    assert e.stage == "not loadable"
    assert "invalid ELF header" in e.reason and "not a shared library" in e.fix


def test_empty_file_is_not_loadable(tmp_path):
    p = tmp_path / "empty.so"
    p.write_bytes(b"")
    e = _load_error(p)
    assert e.stage == "not loadable" and "too short" in e.reason


def test_missing_dependency_names_the_library_and_ld_library_path(libs):
    e = _load_error(libs["missing_dep"])
    assert e.stage == "not loadable"
    assert "libnnptestdep.so" in e.reason
    assert "libnnptestdep.so" in e.fix and "LD_LIBRARY_PATH" in e.fix


def test_missing_entry_symbol(libs):
    e = _load_error(libs["no_entry"])
    assert e.stage == "no entry symbol" and "nnp_backend_entry" in e.reason
    assert "NNP_EXPORT" in e.fix


def test_cpp_mangled_entry_symbol_says_extern_c(libs):
    e = _load_error(libs["mangled"])
    assert e.stage == "no entry symbol" and "C++-mangled" in e.reason
    assert 'extern "C"' in e.fix


def test_major_version_mismatch_newer(libs):
    e = _load_error(libs["major"])
    assert e.stage == "abi version"
    assert f"{abi.ABI_MAJOR + 1}.{abi.ABI_MINOR}.{abi.ABI_PATCH}" in e.reason
    assert "upgrade nnplug" in e.fix


def test_major_version_mismatch_older(libs):
    e = _load_error(libs["old_major"])
    assert e.stage == "abi version" and "rebuild the backend" in e.fix


def test_newer_minor_is_refused_with_the_version_needed(libs):
    e = _load_error(libs["newer_minor"])
    assert e.stage == "abi version" and "newer" in e.reason
    assert f">= {abi.ABI_MAJOR}.{abi.ABI_MINOR + 1}" in e.fix


def test_older_minor_loads(libs, monkeypatch):
    # A host one minor ahead of the backend (what an upgraded nnplug is) still loads it.
    monkeypatch.setattr(abi, "ABI_MINOR", abi.ABI_MINOR + 1)
    monkeypatch.setattr(abi, "ABI_VERSION", (abi.ABI_MAJOR, abi.ABI_MINOR, 0))
    b = load_backend_library(libs["testdev"])
    try:
        assert b.id == "testdev" and b.abi_version[1] < abi.ABI_MINOR
    finally:
        b.close()


@pytest.mark.parametrize("variant,why", [("empty_id", "empty"), ("reserved_id", "reserved"),
                                         ("bad_id", "not [a-z]")])
def test_invalid_ids(libs, variant, why):
    e = _load_error(libs[variant])
    assert e.stage == "invalid id" and why in e.reason


def test_table_smaller_than_the_abi_says(libs):
    e = _load_error(libs["short_table"])
    assert e.stage == "invalid table" and "struct_size 64" in e.reason


def test_init_failure_carries_the_backends_message(libs, stats):
    e = _load_error(libs["init_fail"])
    assert e.stage == "init"
    assert "/dev/nnptest0 is missing; load the nnptest driver" in e.reason


def test_missing_file_and_folder_given_as_a_library(tmp_path):
    with pytest.raises(LibraryLoadError, match="no such file"):
        load_backend_library(tmp_path / "nope.so")
    with pytest.raises(LibraryLoadError, match="not a regular file"):
        load_backend_library(tmp_path)


def test_duplicate_id_is_refused_before_init(tmp_path, libs, stats):
    a = tmp_path / "liba.so"
    shutil.copy(libs["testdev"], a)
    before = stats("testdev")["init"]
    with pytest.raises(LibraryLoadError) as info:
        load_backend_library(a, taken={"testdev": "/somewhere/libfirst.so"})
    assert info.value.stage == "duplicate id" and "/somewhere/libfirst.so" in info.value.reason
    assert stats("testdev")["init"] == before


# -- through a Runtime -------------------------------------------------------------------------------


def _mixed_folder(tmp_path, libs):
    d = tmp_path / "mixed"
    d.mkdir()
    for name in ("testdev", "testcpu", "no_entry", "major", "newer_minor", "empty_id",
                 "init_fail", "missing_dep"):
        shutil.copy(libs[name], d / f"lib_{name}.so")
    shutil.copy(libs["mangled"], d / "lib_mangled.so.1")
    shutil.copy(libs["testdev"], d / "lib_zz_dup.so")   # the same id again, a different file
    (d / "x.so").write_text("a text file, not a library\n" * 8)
    (d / "empty.so").write_bytes(b"")
    (d / "y.so").mkdir()
    os.symlink(d / "lib_testcpu.so", d / "lib_testcpu_link1.so")
    os.symlink(d / "lib_testcpu_link1.so", d / "lib_testcpu_link2.so")
    os.symlink(d / "nothing.so", d / "dangling.so")
    return d


def test_mixed_folder_loads_exactly_the_valid_set(tmp_path, libs, caplog):
    d = _mixed_folder(tmp_path, libs)
    with caplog.at_level(logging.WARNING, logger="nnplug"):
        with bare_runtime(dynamic_backends_path=f"::{d}:relative:{tmp_path}/missing::") as rt:
            assert sorted(rt.backends) == ["testcpu", "testdev"]
            info = rt.backends["testdev"]
            assert info.origin == "dynamic" and info.source.endswith("lib_testdev.so")
            assert info.device_type == "testdev"
            assert rt.backends["testcpu"].device_type == "cpu"
            stages = {os.path.basename(e.source.split("'")[1] if e.stage == "path"
                                       else e.source): e.stage for e in rt.load_errors}
    assert stages == {
        "relative": "path", "missing": "path",
        "dangling.so": "file", "y.so": "file",
        "empty.so": "not loadable", "x.so": "not loadable",
        "lib_missing_dep.so": "not loadable",
        "lib_empty_id.so": "invalid id",
        "lib_init_fail.so": "init",
        "lib_major.so": "abi version", "lib_newer_minor.so": "abi version",
        "lib_mangled.so.1": "no entry symbol", "lib_no_entry.so": "no entry symbol",
        "lib_zz_dup.so": "duplicate id",
    }
    warned = "\n".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for name in stages:
        assert name in warned


def test_empty_override_loads_nothing_even_with_the_variable_set(monkeypatch, libs):
    monkeypatch.setenv(ENV_VAR, os.path.dirname(libs["testdev"]))
    with bare_runtime(dynamic_backends_path="") as rt:
        assert rt.backends == {} and rt.load_errors == []
    with bare_runtime(dynamic_backends_path=None) as rt:
        assert list(rt.backends) == ["testdev"]


def test_two_runtimes_share_one_loaded_library(libs, stats):
    path = libs["testdev"]
    key = lease_key(path)
    before = stats("testdev")
    r1 = bare_runtime(dynamic_backends_path=os.path.dirname(path))
    r2 = bare_runtime(dynamic_backends_path=[os.path.dirname(path)])
    try:
        b1, b2 = r1.backends["testdev"].backend, r2.backends["testdev"].backend
        assert b1.library is b2.library
        assert plugins.BACKENDS.count(key) >= 1
        assert stats("testdev")["init"] == before["init"] + 1
        r1.close()
        assert b2.library.loaded and stats("testdev")["shutdown"] == before["shutdown"]
    finally:
        r1.close()
        r2.close()
    assert not b2.library.loaded
    assert plugins.BACKENDS.count(key) == 0
    assert stats("testdev")["shutdown"] == before["shutdown"] + 1


def test_register_backend_with_a_path(libs):
    with bare_runtime() as rt:
        info = rt.register_backend(libs["testcpu"])
        assert info.id == "testcpu" and rt.backends["testcpu"].backend.path.endswith(".so")
        with pytest.raises(Exception, match="duplicate"):
            rt.register_backend(libs["testcpu"])
