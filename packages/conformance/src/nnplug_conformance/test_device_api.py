"""The device-API contract (TVM's DeviceAPI semantics) of the backend under test."""

from __future__ import annotations

import numpy as np
import pytest

from nnplug import AttrKind, Device


def _host(nbytes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8)


def _read(api, dev, handle, nbytes, offset=0) -> np.ndarray:
    out = np.zeros(nbytes, np.uint8)
    api.copy_data_from_to(handle, offset, out, 0, nbytes, dev, Device("cpu", 0))
    return out


@pytest.mark.parametrize("kind", list(AttrKind), ids=[k.value for k in AttrKind])
def test_attribute_is_a_value_or_none(nnplug_device_api, nnplug_device, kind):
    value = nnplug_device_api.get_attr(nnplug_device, kind)
    ok = value is None or isinstance(value, (bool, int, str)) or (
        isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value))
    assert ok, (f"get_attr({kind.value}) gave {type(value).__name__} {value!r}: expected an int, "
                f"a str, a list of ints (max_thread_dimensions) or None")
    if kind is AttrKind.EXIST:
        assert value, "the backend's own device must exist"
    if isinstance(value, int) and not isinstance(value, bool):
        assert value >= 0


def test_attribute_of_a_missing_device(nnplug_device_api, nnplug_backend):
    missing = Device(nnplug_backend.device_type_number, 4095)
    assert not nnplug_device_api.get_attr(missing, AttrKind.EXIST)


def test_unknown_attribute_kind_is_a_clear_error(nnplug_device_api, nnplug_device):
    with pytest.raises(ValueError, match="no_such_kind"):
        nnplug_device_api.get_attr(nnplug_device, "no_such_kind")


def test_set_device(nnplug_device_api, nnplug_device):
    nnplug_device_api.set_device(nnplug_device)


@pytest.mark.parametrize("nbytes", [1, 4096, 1 << 20 | 3])
def test_alloc_round_trip_free(nnplug_device_api, nnplug_device, nbytes):
    api, dev = nnplug_device_api, nnplug_device
    data = _host(nbytes, nbytes)
    handle = api.alloc_data_space(dev, nbytes, 64, np.uint8)
    try:
        api.copy_data_from_to(data, 0, handle, 0, nbytes, Device("cpu", 0), dev)
        assert np.array_equal(_read(api, dev, handle, nbytes), data)
    finally:
        api.free_data_space(dev, handle)


def test_many_allocations_are_distinct(nnplug_device_api, nnplug_device):
    api, dev = nnplug_device_api, nnplug_device
    handles = [api.alloc_data_space(dev, 256, 64, np.float32) for _ in range(16)]
    try:
        for i, h in enumerate(handles):
            api.copy_data_from_to(np.full(256, i, np.uint8), 0, h, 0, 256, Device("cpu", 0), dev)
        for i, h in enumerate(handles):
            assert (_read(api, dev, h, 256) == i).all(), "allocations overlap"
    finally:
        for h in handles:
            api.free_data_space(dev, h)


def test_copies_in_every_direction_with_offsets(nnplug_device_api, nnplug_device):
    api, dev, cpu = nnplug_device_api, nnplug_device, Device("cpu", 0)
    n = 1000
    src = _host(n, 1)
    a = api.alloc_data_space(dev, n + 64)
    b = api.alloc_data_space(dev, n + 128)
    try:
        api.copy_data_from_to(np.zeros(n + 64, np.uint8), 0, a, 0, n + 64, cpu, dev)
        api.copy_data_from_to(src, 10, a, 24, n - 10, cpu, dev)  # host -> device
        got = _read(api, dev, a, n + 64)
        assert np.array_equal(got[24:24 + n - 10], src[10:]), "host->device with offsets"
        assert not got[:24].any() and not got[24 + n - 10:].any(), "host->device wrote outside"
        api.copy_data_from_to(a, 24, b, 100, n - 10, dev, dev)  # device -> device
        got = _read(api, dev, b, n - 10, offset=100)
        assert np.array_equal(got, src[10:]), "device->device with offsets"
        host = np.zeros(n + 16, np.uint8)
        api.copy_data_from_to(b, 150, host, 7, n - 60, dev, cpu)  # device -> host
        assert np.array_equal(host[7:7 + n - 60], src[60:]), "device->host with offsets"
        assert not host[:7].any() and not host[7 + n - 60:].any(), "device->host wrote outside"
    finally:
        api.free_data_space(dev, a)
        api.free_data_space(dev, b)


def test_out_of_bounds_copy_is_refused(nnplug_device_api, nnplug_device):
    api, dev = nnplug_device_api, nnplug_device
    a = api.alloc_data_space(dev, 64)
    try:
        with pytest.raises(Exception) as e:
            api.copy_data_from_to(np.zeros(128, np.uint8), 0, a, 0, 128, Device("cpu", 0), dev)
        assert "bound" in str(e.value) or "128" in str(e.value)
    finally:
        api.free_data_space(dev, a)


def test_workspaces(nnplug_device_api, nnplug_device):
    api, dev, cpu = nnplug_device_api, nnplug_device, Device("cpu", 0)
    first = api.alloc_workspace(dev, 5000)
    second = api.alloc_workspace(dev, 100)
    try:
        for i, ws in enumerate((first, second)):
            data = _host(100, i)
            api.copy_data_from_to(data, 0, ws, 0, 100, cpu, dev)
            assert np.array_equal(_read(api, dev, ws, 100), data)
    finally:
        api.free_workspace(dev, first)
        api.free_workspace(dev, second)
    again = api.alloc_workspace(dev, 5000)  # typically the pooled block comes back
    data = _host(5000, 3)
    api.copy_data_from_to(data, 0, again, 0, 5000, cpu, dev)
    assert np.array_equal(_read(api, dev, again, 5000), data)
    api.free_workspace(dev, again)
    release = getattr(api, "release_workspaces", None)
    if release is not None:
        release(dev)


@pytest.fixture
def streams(nnplug_device_api, nnplug_device):
    api, dev = nnplug_device_api, nnplug_device
    s1 = api.create_stream(dev)
    if s1 is None:
        pytest.skip("the device has a single queue (create_stream gave None)")
    s2 = api.create_stream(dev)
    yield s1, s2
    api.free_stream(dev, s1)
    api.free_stream(dev, s2)


def test_copy_on_a_stream_then_sync(nnplug_device_api, nnplug_device, streams):
    api, dev, cpu = nnplug_device_api, nnplug_device, Device("cpu", 0)
    s1, _ = streams
    n = 1 << 16
    data = _host(n, 5)
    a = api.alloc_data_space(dev, n)
    try:
        api.set_stream(dev, s1)
        api.copy_data_from_to(data, 0, a, 0, n, cpu, dev, stream=s1)
        out = np.zeros(n, np.uint8)
        api.copy_data_from_to(a, 0, out, 0, n, dev, cpu, stream=s1)
        api.stream_sync(dev, s1)
        assert np.array_equal(out, data)
    finally:
        api.set_stream(dev, None)
        api.free_data_space(dev, a)


def test_ordering_between_streams(nnplug_device_api, nnplug_device, streams):
    """Work queued on s2 after sync_stream_from_to(s1, s2) sees what s1 did before it."""
    api, dev, cpu = nnplug_device_api, nnplug_device, Device("cpu", 0)
    s1, s2 = streams
    n = 8 << 20
    for round_ in range(3):
        data = _host(n, 10 + round_)
        a = api.alloc_data_space(dev, n)
        b = api.alloc_data_space(dev, n)
        try:
            api.copy_data_from_to(np.zeros(n, np.uint8), 0, b, 0, n, cpu, dev)
            api.copy_data_from_to(data, 0, a, 0, n, cpu, dev, stream=s1)
            api.sync_stream_from_to(dev, s1, s2)
            api.copy_data_from_to(a, 0, b, 0, n, dev, dev, stream=s2)
            api.stream_sync(dev, s2)
            assert np.array_equal(_read(api, dev, b, n), data), f"round {round_}: s2 ran early"
        finally:
            api.stream_sync(dev, s1)
            api.free_data_space(dev, a)
            api.free_data_space(dev, b)
