"""Registration and, for native backends, ABI checks of the backend under test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto, helper

from nnplug import (
    NnplugError,
    Node,
    PluginError,
    SubGraph,
    Target,
    UnsupportedNodeError,
    ValueInfo,
    get_func,
)
from nnplug.plugins import RESERVED_IDS

ID_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def _abi():
    from nnplug.native import abi

    return abi


def _library(backend):
    """The backend's in-process library (its table); a skip for an isolated backend, whose
    library lives in a worker process (NNPLUG_ISOLATE_PLUGINS)."""
    if getattr(backend, "worker", None) is not None and not hasattr(backend, "library"):
        pytest.skip("the backend runs isolated in a worker process (NNPLUG_ISOLATE_PLUGINS / "
                    "isolate_plugins): its table is checked in a run without isolation")
    return backend.library


def test_backend_id_is_valid(nnplug_backend):
    bid = nnplug_backend.id
    assert isinstance(bid, str) and ID_RE.match(bid), \
        f"backend id {bid!r} must be 1-32 characters of [a-z0-9_] starting with a letter"
    assert bid not in RESERVED_IDS, \
        f"backend id {bid!r} is reserved ({', '.join(sorted(RESERVED_IDS))})"


def test_entry_point_name_is_the_backend_id(nnplug_subject, nnplug_backend):
    ep = nnplug_subject.entry_point
    if ep is None:
        pytest.skip("not loaded through an entry point")
    assert ep.name == nnplug_backend.id, (
        f"entry point {ep.name!r} gives backend {nnplug_backend.id!r}: name the entry point "
        f"after the id so `--backend {nnplug_backend.id}` and `nnplug info` agree")


def test_device_type_is_known(nnplug_backend):
    from nnplug.device import device_type_name

    number = nnplug_backend.device_type_number
    assert isinstance(number, int) and number > 0
    assert device_type_name(number)


def test_target_kind_is_registered(nnplug_backend):
    target = Target(nnplug_backend.target_kind_name)
    assert target.kind.name == nnplug_backend.target_kind_name
    assert target.device.device_type == nnplug_backend.device_type_number
    assert Target(target.export()) == target, "a target must round-trip through its JSON form"


def test_global_functions_are_registered(nnplug_backend):
    api = get_func(f"device_api.{nnplug_backend.id}")()
    assert api is nnplug_backend.device_api()
    assert callable(get_func(f"target.build.{nnplug_backend.target_kind_name}"))


def test_device_api_is_one_shared_object(nnplug_backend):
    from nnplug import DeviceAPI

    api = nnplug_backend.device_api()
    assert isinstance(api, DeviceAPI)
    assert nnplug_backend.device_api() is api


def _unknown_node():
    return Node("n0", "NnplugNoSuchOp", "com.example.conformance", ["x"], ["y"], {}, 1)


def test_supports_declines_an_unknown_op(nnplug_backend):
    node = _unknown_node()
    vi = {"x": ValueInfo("x", np.dtype(np.float32), (2, 3)), "y": ValueInfo("y", None, None)}
    graph = SubGraph([node], ["x"], ["y"], {}, vi, {"": 17, "com.example.conformance": 1})
    assert nnplug_backend.supports(node, graph) in (False, 0), \
        "supports() must answer False (not raise) for ops the backend does not know"


def _unknown_op_model():
    node = helper.make_node("NnplugNoSuchOp", ["x"], ["y"], domain="com.example.conformance")
    graph = helper.make_graph([node], "unknown", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("com.example.conformance", 1)])


def test_unsupported_node_is_a_clear_error(nnplug_subject, nnplug_backend):
    with pytest.raises(UnsupportedNodeError) as e:
        nnplug_subject.runtime.load(_unknown_op_model(), backends=[nnplug_backend.id])
    text = str(e.value)
    assert "NnplugNoSuchOp" in text and nnplug_backend.id in text


def test_duplicate_registration_is_refused(nnplug_subject, nnplug_backend):
    obj = nnplug_subject.native_path or type(nnplug_backend)
    with pytest.raises(PluginError) as e:
        nnplug_subject.runtime.register_backend(obj)
    assert nnplug_backend.id in str(e.value)


def _simple_model(op: str):
    inputs = ["a", "b"] if op in ("Add", "Mul") else ["a"]
    node = helper.make_node(op, inputs, ["y"])
    vis = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 64]) for n in inputs]
    graph = helper.make_graph([node], op.lower(), vis,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_REFERENCE = {
    "Add": lambda a, b: a + b, "Mul": lambda a, b: a * b,
    "Relu": lambda a: np.maximum(a, 0), "Neg": lambda a: -a, "Abs": np.abs,
    "Sigmoid": lambda a: 1 / (1 + np.exp(-a)),
}


def test_runs_concurrently_from_many_threads(nnplug_subject, nnplug_backend):
    """A loaded network is run from 4 threads at once with distinct inputs."""
    rt = nnplug_subject.runtime
    for op, ref in _REFERENCE.items():  # noqa: B007 (ref is used by the threads below)
        try:
            net = rt.load(_simple_model(op), backends=[nnplug_backend.id])
        except UnsupportedNodeError:
            continue
        break
    else:
        pytest.skip(f"the backend supports none of {', '.join(_REFERENCE)} on float32")
    n_in = 2 if op in ("Add", "Mul") else 1
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(20):
                feeds = {k: rng.standard_normal((4, 64)).astype(np.float32) for k in "ab"[:n_in]}
                got = net.run(feeds)["y"]
                want = ref(*feeds.values())
                if not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                    errors.append(f"thread {seed}: wrong result")
                    return
        except Exception as e:  # reported below, with the thread
            errors.append(f"thread {seed}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    net.close()
    assert not errors, f"concurrent runs of {op}: " + "; ".join(errors)


# -- native ABI ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def native_path(nnplug_subject, nnplug_backend):
    if not nnplug_subject.native_path:
        pytest.skip("not a native backend")
    return nnplug_subject.native_path


def test_header_version_matches_the_host(nnplug_backend, native_path):
    """The backend was built against a header this host accepts (same major, minor not newer),
    and the shipped header agrees with the host's ABI."""
    from nnplug import get_include

    abi = _abi()
    with open(os.path.join(get_include(), "nnplug", "backend.h")) as f:
        text = f.read()
    header = tuple(int(re.search(rf"#define NNP_BACKEND_ABI_{p}\s+(\d+)", text).group(1))
                   for p in ("MAJOR", "MINOR", "PATCH"))
    assert header == abi.ABI_VERSION, f"installed backend.h is {header}, host ABI {abi.ABI_VERSION}"
    library = _library(nnplug_backend)
    major, minor, _ = library.abi_version
    assert major == abi.ABI_MAJOR and minor <= abi.ABI_MINOR, (
        f"backend ABI {library.abi_version} cannot load on host {abi.ABI_VERSION}")


def test_entry_symbol_gives_the_registered_table(nnplug_backend, native_path):
    import ctypes

    abi = _abi()
    library = _library(nnplug_backend)
    lib = ctypes.CDLL(native_path, mode=getattr(os, "RTLD_LOCAL", 0))
    entry = getattr(lib, abi.ENTRY_SYMBOL)  # AttributeError: not exported (or C++-mangled)
    entry.restype = ctypes.c_void_p
    entry.argtypes = [ctypes.POINTER(abi.Version)]
    address = entry(ctypes.byref(abi.Version(*abi.ABI_VERSION)))
    assert address, f"{abi.ENTRY_SYMBOL} returned NULL for host ABI {abi.ABI_VERSION}"
    table, size = abi.read_table(address)
    assert size >= abi.MIN_STRUCT_SIZE, f"struct_size {size} < {abi.MIN_STRUCT_SIZE}"
    assert (table.id or b"").decode() == nnplug_backend.id
    assert table.abi_version.tuple() == library.abi_version
    assert again_same(entry, abi, address), "the entry must return the same static table each call"


def again_same(entry, abi, address):
    import ctypes

    return entry(ctypes.byref(abi.Version(*abi.ABI_VERSION))) == address


def test_required_entries_are_present(nnplug_backend, native_path):
    abi = _abi()
    table = _library(nnplug_backend).table
    missing = [name for name in abi.REQUIRED_ENTRIES if not getattr(table, name)]
    assert not missing, f"required table entries are NULL: {', '.join(missing)}"
    for group in abi.PAIRED_ENTRIES:
        present = [bool(getattr(table, n)) for n in group]
        assert all(present) or not any(present), f"provide all or none of {', '.join(group)}"


def test_cpu_backends_are_host_visible(nnplug_backend, native_path):
    abi = _abi()
    library = _library(nnplug_backend)
    if library.device_type != 1:
        pytest.skip("not a CPU backend")
    assert library.flags & abi.HOST_VISIBLE, \
        "backends with device_type NNP_DEVICE_CPU must set NNP_BACKEND_HOST_VISIBLE"


# Broken calls made in child processes: a crash there is ONE failure, of the check whose call
# crashed; the calls after it run in a fresh child, so the checks that are fine still pass.
_PROBE = r"""
import ctypes as C, json, sys
from nnplug.native import abi
from nnplug.native.loader import load_backend_library
b = load_backend_library(sys.argv[1])
t = b.library.table
dev = abi.Device(b.library.device_type, 0)
v = abi.AttrValue()
def err():
    m = t.last_error()
    return m.decode("utf-8", "replace") if m else ""
calls = {
    "supports(NULL node)": lambda: t.supports(None, C.byref(C.c_int32())),
    "supports(NULL result)": lambda: t.supports(C.byref(abi.NodeDesc()), None),
    "kernel_create(NULL nodes)": lambda: t.kernel_create(None, 1, dev, C.byref(C.c_void_p())),
    "alloc_data_space(NULL out)": lambda: t.alloc_data_space(dev, 64, 64, abi.DType(2, 32, 1), None),
    "copy_data_from_to(NULL from)": lambda: t.copy_data_from_to(None, 0, None, 0, 16, dev, dev, abi.COPY_DEVICE_TO_DEVICE, None),
    "get_attr(NULL out)": lambda: t.get_attr(dev, 0, None),
    "get_attr(unknown kind)": lambda: t.get_attr(dev, 9999, C.byref(v)),
}
for name in sys.argv[2:]:
    print("calling " + name, file=sys.stderr, flush=True)
    rc = calls[name]()
    print(json.dumps({name: {"rc": int(rc), "message": err(), "type": int(v.type)}}), flush=True)
"""
NULL_CALLS = ["supports(NULL node)", "supports(NULL result)", "kernel_create(NULL nodes)",
              "alloc_data_space(NULL out)", "copy_data_from_to(NULL from)", "get_attr(NULL out)"]
PROBED_CALLS = [*NULL_CALLS, "get_attr(unknown kind)"]


def _death(returncode) -> str:
    import signal

    if returncode is None:
        return "hung (killed after 120 s)"
    if returncode < 0:
        try:
            return f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died of signal {-returncode}"
    return f"exited with status {returncode}"


def _text(data) -> str:
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")


def probe_calls(native_path: str, names=PROBED_CALLS) -> dict:
    """name -> {"rc", "message", "type"} for each call, or {"crash": why} for the call the
    child process died (or hung) in; the calls after it run in a new child."""
    results, todo = {}, list(names)
    while todo:
        try:
            proc = subprocess.run([sys.executable, "-c", _PROBE, native_path, *todo],
                                  capture_output=True, text=True, timeout=120)
            out, err, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            out, err, rc = _text(e.stdout), _text(e.stderr), None
        for line in out.splitlines():
            if line.startswith("{"):
                results.update(json.loads(line))
        todo = [n for n in todo if n not in results]
        if rc == 0 or not todo:
            break
        calling = [line[len("calling "):] for line in err.splitlines() if line.startswith("calling ")]
        if not calling or calling[-1] not in todo:  # it failed before making any call
            tail = err.strip().splitlines()[-1:] or ["?"]
            for n in todo:
                results[n] = {"crash": f"the probe process {_death(rc)} before calling it: {tail[0]}"}
            break
        results[calling[-1]] = {"crash": f"the call crashed the process (it {_death(rc)})"}
        todo.remove(calling[-1])
    return results


@pytest.fixture(scope="module")
def broken_calls(native_path):
    return probe_calls(native_path)


@pytest.mark.parametrize("call", NULL_CALLS)
def test_broken_call_reports_an_error(broken_calls, call):
    """NULL arguments are refused with a status and a last_error() message, never a crash."""
    result = broken_calls[call]
    assert "crash" not in result, (
        f"{call}: {result.get('crash')}; validate the argument and return "
        f"NNP_STATUS_INVALID_ARGUMENT with a message instead (nnplug/common.h CONVENTIONS)")
    assert result["rc"] != 0, f"{call} returned NNP_OK"
    assert result["message"].strip(), f"{call} returned status {result['rc']} but last_error() is empty"


def test_unknown_attribute_kind_is_none_not_an_error(broken_calls):
    result = broken_calls["get_attr(unknown kind)"]
    assert "crash" not in result, f"get_attr(kind 9999): {result.get('crash')}"
    assert result["rc"] == 0, (f"get_attr(kind 9999) failed ({result['rc']}: {result['message']}); "
                               f"unknown kinds answer NONE")
    assert result["type"] == 0


def test_errors_surface_with_the_backend_message(nnplug_backend, native_path):
    """A failing call becomes an NnplugError carrying the backend's own message."""
    from nnplug import Device

    _library(nnplug_backend)  # isolated: the application's memory is its own, not the backend's
    api = nnplug_backend.device_api()
    with pytest.raises(NnplugError) as e:  # 1 EiB: no machine has it
        api.alloc_data_space(Device(nnplug_backend.device_type_number, 0), 1 << 60)
    text = str(e.value)
    assert nnplug_backend.id in text and "alloc_data_space" in text, text
