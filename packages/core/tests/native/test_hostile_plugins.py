"""Hostile native libraries in a plugin folder: truncated files, unbounded or non-UTF-8 strings,
entry points that crash. Each is a load error naming the file; none takes the process down.

Every load runs in a child process, so that a regression shows as a failed test (with the
signal) instead of killing the test run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from nativelib import compile_backend, compiler, guarded_page

from nnplug.native import strings
from nnplug.native.loader import LibraryLoadError, check_library_file

HERE = os.path.dirname(__file__)
OPS_DIR = os.path.join(os.path.dirname(HERE), "custom_ops")

# What Runtimes made for exactly these folders load and report, as JSON: one per case, each
# with its own TB_* variables (the hostile libraries read them when they are loaded).
_CHILD = """
import json, os, sys
from nnplug import CreationOptions, Runtime
out = []
for case in json.loads(sys.argv[1]):
    for k in [k for k in os.environ if k.startswith("TB_")]:
        del os.environ[k]
    os.environ.update(case["env"])
    rt = Runtime(CreationOptions.isolated(dynamic_backends_path=case["backends"],
                                          custom_op_paths=case["ops"],
                                          isolate_native=case["isolate"]))
    out.append({
        "backends": {k: {"version": b.backend.version, "device": b.device_type}
                     for k, b in rt.backends.items()},
        "ops": sorted(rt.ops),
        "errors": [{"source": e.source, "stage": e.stage, "reason": e.reason, "fix": e.fix}
                   for e in rt.load_errors],
    })
    rt.close()
print(json.dumps(out))
"""


def child_env(**tb):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TB_")}
    env["PYTHONPATH"] = os.pathsep.join([HERE, env.get("PYTHONPATH", "")])
    env.update(tb_vars(**tb))
    return env


def tb_vars(**tb):
    return {f"TB_{k.upper()}": str(v) for k, v in tb.items()}


def case(backend_dir="", op_dir="", isolate=False, **tb):
    return {"backends": str(backend_dir), "ops": str(op_dir), "isolate": isolate,
            "env": tb_vars(**tb)}


def load_cases_in_child(cases, expect_ok=True):
    """Each case loaded by its own Runtime, all in one child process: a list of results."""
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases)], env=child_env(),
                       capture_output=True, text=True, timeout=240)
    if not expect_ok:
        return r
    assert r.returncode == 0, (f"the process died ({_how(r.returncode)}):\n"
                               f"{r.stdout}{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def load_in_child(backend_dir="", op_dir="", isolate=False, expect_ok=True, **tb):
    r = load_cases_in_child([case(backend_dir, op_dir, isolate, **tb)], expect_ok)
    return r[0] if expect_ok else r


def _how(rc: int) -> str:
    return signal.Signals(-rc).name if rc < 0 else f"exit status {rc}"


def doctor(*args, **tb):
    return subprocess.run([sys.executable, "-m", "nnplug", "doctor", "--no-entry-points",
                           *map(str, args)], env=child_env(**tb), capture_output=True, text=True,
                          timeout=240)


def folder(tmp_path, name, files: dict):
    d = tmp_path / name
    d.mkdir()
    for target, src in files.items():
        if isinstance(src, bytes):
            (d / target).write_bytes(src)
        else:
            shutil.copy(src, d / target)
    return d


def only_error(result, path):
    errors = [e for e in result["errors"] if e["source"] == str(path)]
    assert len(errors) == 1, result
    return errors[0]


# -- compiled variants -------------------------------------------------------------------------
HOSTILE_FIELDS = ["id", "version", "device_type_name"]
HOSTILE_KINDS = {1: "no NUL before a guard page", 2: "not UTF-8", 3: "16 MB long"}
# Under AddressSanitizer (the sanitize session preloads it) a segfault is ASan's report and
# then abort(): the process dies of SIGABRT.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
SEGV = "SIGABRT" if UNDER_ASAN else "SIGSEGV"
CRASHES = {"entry_segv": SEGV, "entry_abort": "SIGABRT", "ctor_abort": "SIGABRT"}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """The hostile backend and op library (steered by TB_* variables, see testbackend.c) and a
    good backend to sit beside them."""
    root = tmp_path_factory.mktemp("hostile")

    def build(name):
        if name == "op":
            out = str(root / "libnnplug_op_hostile.so")
            cc = shutil.which(os.environ.get("CC", "cc")) or compiler()
            subprocess.run([cc, "-O1", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall",
                            f"-I{_include()}", "-DHOSTILE_OP_TYPE",
                            os.path.join(OPS_DIR, "testops.c"), "-o", out], check=True)
            return name, out
        flags = ["-DTB_HOSTILE=1"] if name == "backend" else \
            ["-DTB_HOST_VISIBLE=1", '-DTB_ID="goodcpu"']
        return name, compile_backend("testbackend.c", str(root / f"libnnplug_{name}.so"),
                                     ["-O1", *flags])

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(build, ["backend", "good", "op"]))


def _include():
    import nnplug

    return nnplug.get_include()


# -- finding: truncated files -------------------------------------------------------------------
def test_truncated_backend_is_a_load_error_naming_the_file(tmp_path, libs):
    data = open(libs["testcpu"], "rb").read()
    d = folder(tmp_path, "trunc", {"libnnplug_cut600.so": data[:600],
                                   "libnnplug_cuthalf.so": data[:len(data) // 2],
                                   "libnnplug_testcpu.so": libs["testcpu"]})
    result = load_in_child(d)
    assert list(result["backends"]) == ["testcpu"]  # the whole copy beside them still loads
    for name in ("libnnplug_cut600.so", "libnnplug_cuthalf.so"):
        e = only_error(result, d / name)
        assert e["stage"] == "not loadable"
        assert e["reason"].startswith("file truncated:") and "the file has" in e["reason"]
        assert "reinstall or rebuild" in e["fix"]


def test_header_checks_reject_what_dlopen_would_fault_on(tmp_path, libs):
    data = open(libs["testcpu"], "rb").read()
    cases = {"cut40.so": (data[:40], "too short"), "cut600.so": (data[:600], "truncated"),
             "text.so": (b"not a library\n" * 8, "invalid ELF header"),
             "empty.so": (b"", "too short")}
    for name, (content, needle) in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(LibraryLoadError) as e:
            check_library_file(tmp_path / name, "backend")
        assert e.value.stage == "not loadable" and needle in e.value.reason, e.value
        assert str(tmp_path / name) in str(e.value)
    assert check_library_file(libs["testcpu"], "backend") == libs["testcpu"]


def test_truncated_op_library_is_a_load_error(tmp_path, libs):
    # an op folder takes only libnnplug_op_*.so: a cut copy of a real library under that name
    data = open(libs["testcpu"], "rb").read()
    d = folder(tmp_path, "ops", {"libnnplug_op_cut.so": data[:600]})
    e = only_error(load_in_child(op_dir=d), d / "libnnplug_op_cut.so")
    assert e["stage"] == "not loadable" and e["reason"].startswith("file truncated:")


def test_doctor_survives_truncated_libraries_in_both_kinds_of_folder(tmp_path, libs):
    data = open(libs["testcpu"], "rb").read()
    b = folder(tmp_path, "b", {"libnnplug_cut.so": data[:600]})
    o = folder(tmp_path, "o", {"libnnplug_op_cut.so": data[:600]})
    r = doctor("--path", b, "--op-path", o)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout.count("found but not loadable: not loadable: file truncated") == 2, r.stdout
    assert "Custom-op folders (from --op-path):" in r.stdout


# -- finding: plugin strings ----------------------------------------------------------------------
def test_hostile_backend_strings_are_bounded_and_decoded(tmp_path, hostile):
    d = folder(tmp_path, "b", {"libnnplug_hostile.so": hostile["backend"]})
    where = str(d / "libnnplug_hostile.so")
    todo = [(field, kind) for field in HOSTILE_FIELDS for kind in HOSTILE_KINDS]
    results = load_cases_in_child([case(d, hostile_field=f, hostile_kind=k) for f, k in todo])
    for (field, kind), result in zip(todo, results):
        what = f"{field} {HOSTILE_KINDS[kind]}: {result}"
        if field == "version" and kind == 2:  # a version is free text: shown with U+FFFD
            (info,) = result["backends"].values()
            assert info["version"] == b"dev\xff\xfe\xc3(name".decode("utf-8", "replace"), what
            continue
        e = only_error(result, where)
        assert len(e["reason"]) < 400, what  # a 16 MB string is cut, not copied whole
        if kind == 1:
            assert e["stage"] == "invalid table", what
            assert "no NUL terminator before unreadable memory (after 8 bytes)" in e["reason"]
        elif kind == 3:
            assert e["stage"] == "invalid table" and "longer than" in e["reason"], what
            assert "NNP_MAX_" in e["fix"], what
        elif field == "id":
            assert e["stage"] == "invalid id" and "\ufffd" in e["reason"], what
        else:
            assert e["stage"] == "invalid table" and "device type" in e["reason"], what


def test_doctor_reports_a_non_utf8_device_name(tmp_path, hostile):
    d = folder(tmp_path, "b", {"libnnplug_x.so": hostile["backend"]})
    r = doctor("--path", d, hostile_field="device_type_name", hostile_kind=2)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert "libnnplug_x.so: found but not loadable: invalid table: device type" in r.stdout


def test_hostile_op_types_are_bounded_and_decoded(tmp_path, hostile):
    d = folder(tmp_path, "o", {"libnnplug_op_hostile.so": hostile["op"]})
    results = load_cases_in_child([case(op_dir=d, hostile_kind=k) for k in HOSTILE_KINDS])
    for kind, result in zip(HOSTILE_KINDS, results):
        e = only_error(result, d / "libnnplug_op_hostile.so")
        assert e["stage"] == "invalid op" and len(e["reason"]) < 400, e
        assert {1: "no NUL terminator", 2: "op_type must be a name", 3: "longer than"}[kind] in \
            e["reason"], e


def test_opencl_source_size_is_bounded_and_read_safely(tmp_path, hostile):
    d = folder(tmp_path, "o", {"libnnplug_op_hostile.so": hostile["op"]})
    sizes = {"100": "unreadable after 8 of its cl_source_size 100 bytes",
             str(1 << 40): "is over NNP_MAX_CL_SOURCE_BYTES"}
    results = load_cases_in_child([case(op_dir=d, hostile_cl_size=n) for n in sizes])
    for needle, result in zip(sizes.values(), results):
        e = only_error(result, d / "libnnplug_op_hostile.so")
        assert e["stage"] == "invalid op" and needle in e["reason"], e


def test_string_reads_stop_at_the_limit_and_at_unreadable_memory():
    import ctypes

    base, page = guarded_page(b"a")
    s = strings.read(base + page - 5, 100)
    assert s.raw == b"aaaaa" and "no NUL terminator" in s.problem
    s = strings.read(base, 10)
    assert s.raw == b"a" * 10 and s.problem == "longer than 10 bytes"
    assert strings.read(base + page, 10).problem.startswith("points to unreadable memory")
    assert strings.read(0, 10) is None
    ctypes.memset(base + 3, 0, 1)
    assert strings.read(base, 10).raw == b"aaa" and strings.read(base, 10).problem is None


# -- finding: crashing libraries -----------------------------------------------------------------
def test_isolate_native_reports_crashing_backends_and_keeps_the_good_ones(tmp_path, hostile):
    d = folder(tmp_path, "b", {"libnnplug_crash.so": hostile["backend"],
                               "libnnplug_good.so": hostile["good"]})
    plain = load_in_child(d, expect_ok=False, crash="entry_segv")  # unscreened: ours to die
    assert plain.returncode == -getattr(signal, SEGV), plain.stderr[-2000:]
    results = load_cases_in_child([case(d, isolate=True, crash=name) for name in CRASHES])
    for (name, sig), result in zip(CRASHES.items(), results):
        assert list(result["backends"]) == ["goodcpu"], (name, result)
        e = only_error(result, d / "libnnplug_crash.so")
        assert e["stage"] == "crashed", (name, e)
        assert f"loading it in a child process died of {sig}" in e["reason"], (name, e)
        assert "remove it from the folder" in e["fix"]


def test_doctor_isolate_reports_the_crash_and_goes_on(tmp_path, hostile):
    d = folder(tmp_path, "b", {"libnnplug_a_segv.so": hostile["backend"],
                               "libnnplug_b_good.so": hostile["good"]})
    r = doctor("--isolate", "--path", d, crash="entry_segv")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stdout + r.stderr
    assert ("libnnplug_a_segv.so: found but not loadable: crashed: loading it in a child "
            f"process died of {SEGV}") in r.stdout
    assert "libnnplug_b_good.so: registered: backend 'goodcpu'" in r.stdout
    assert "1 problem(s) found" in r.stdout
