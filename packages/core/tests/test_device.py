import pytest

import nnplug
from nnplug.device import EXTENSION_TYPE_BASE, device_type_name


def test_device_parses_name_index_and_string_forms():
    assert nnplug.device("opencl", 0) == nnplug.device("opencl:0") == nnplug.Device(4, 0)
    assert nnplug.device("cpu") == nnplug.CPU
    assert nnplug.device("cuda:1").device_type == 2
    assert str(nnplug.device("opencl", 2)) == "opencl:2"
    assert nnplug.device(4, 1).__dlpack_device__() == (4, 1)


@pytest.mark.parametrize("bad", ["tpu", "opencl:x", "opencl:-1"])
def test_device_rejects_unknown_or_malformed(bad):
    with pytest.raises(ValueError):
        nnplug.device(bad)


def test_index_given_twice_is_an_error():
    with pytest.raises(ValueError, match="twice"):
        nnplug.device("opencl:0", 1)


def test_plugins_get_extension_device_types():
    t = nnplug.register_device_type("testnpu")
    assert t >= EXTENSION_TYPE_BASE
    assert nnplug.register_device_type("testnpu") == t  # idempotent
    assert device_type_name(t) == "testnpu"
    assert nnplug.device("testnpu:3") == nnplug.Device(t, 3)
    with pytest.raises(ValueError, match="already"):
        nnplug.register_device_type("testnpu", t + 1)
    with pytest.raises(ValueError, match="belongs to 'cpu'"):
        nnplug.register_device_type("othernpu", 1)
