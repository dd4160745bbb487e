import numpy as np
import pytest

from nnplug import CPU, AttrKind, HostDeviceAPI


@pytest.fixture
def api():
    return HostDeviceAPI()


def test_every_attribute_kind_answers_a_value_or_none(api):
    for kind in AttrKind:
        value = api.get_attr(CPU, kind)
        assert value is None or isinstance(value, (int, str, bool, list, tuple))
    assert api.get_attr(CPU, "exist") is True
    assert api.get_attr(CPU, "multi_processor_count") >= 1
    assert api.get_attr(CPU, "warp_size") is None
    with pytest.raises(ValueError, match="unknown device attribute kind"):
        api.get_attr(CPU, "colour")


def test_copies_honour_offsets_and_bounds(api):
    src = api.alloc_data_space(CPU, 16)
    dst = api.alloc_data_space(CPU, 16)
    assert src.ctypes.data % 64 == 0
    src[:] = np.arange(16, dtype=np.uint8)
    dst[:] = 0
    api.copy_data_from_to(src, 4, dst, 8, 6, CPU, CPU)
    assert dst.tolist() == [0] * 8 + [4, 5, 6, 7, 8, 9] + [0, 0]
    with pytest.raises(ValueError, match="out of bounds"):
        api.copy_data_from_to(src, 12, dst, 0, 8, CPU, CPU)


def test_workspaces_come_back_from_the_pool(api):
    a = api.alloc_workspace(CPU, 1000)
    api.free_workspace(CPU, a)
    b = api.alloc_workspace(CPU, 3000)  # same 4 KiB class: reused
    assert b is a
    c = api.alloc_workspace(CPU, 3000)
    assert c is not a
    with pytest.raises(ValueError, match="alloc_workspace"):
        api.free_workspace(CPU, api.alloc_data_space(CPU, 8))


def test_single_queue_device_streams(api):
    s = api.create_stream(CPU)
    assert s is None
    api.set_stream(CPU, s)
    api.stream_sync(CPU, s)
    api.sync_stream_from_to(CPU, s, s)
    api.free_stream(CPU, s)
