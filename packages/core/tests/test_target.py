import pytest

import nnplug
from nnplug import Target, TargetError
from nnplug.target import remove_target_kind


@pytest.fixture
def kind():
    calls = []

    def canon(attrs, given):
        calls.append(set(given))
        if "max_num_threads" not in given:
            attrs["max_num_threads"] = 64  # "read from the device"
        return attrs

    k = nnplug.register_target_kind("testgpu", "opencl",
                                    {"max_num_threads": (int, 256), "mcpu": (str, ""),
                                     "fast_math": (bool, False), "scale": (float, 1.0)},
                                    canonicalizer=canon)
    yield calls
    remove_target_kind("testgpu", k)


def test_target_from_name_json_and_dict(kind):
    assert Target("testgpu").attrs["max_num_threads"] == 64  # canonicalizer filled it
    t = Target('{"kind": "testgpu", "max_num_threads": 128, "device_id": 1}')
    assert t.attrs["max_num_threads"] == 128  # explicit value wins over the device's
    assert t.device == nnplug.device("opencl:1")
    assert Target({"kind": "testgpu", "scale": 2}).attrs["scale"] == 2.0
    assert Target(t) == t
    assert Target(str(t)) == t


def test_unknown_kind_attribute_and_wrong_type_are_clear_errors(kind):
    with pytest.raises(TargetError, match="unknown target kind 'nope'"):
        Target("nope")
    with pytest.raises(TargetError, match="has no attribute.*colour"):
        Target({"kind": "testgpu", "colour": "red"})
    with pytest.raises(TargetError, match="'max_num_threads' must be int, got str"):
        Target('{"kind": "testgpu", "max_num_threads": "many"}')
    with pytest.raises(TargetError, match="must be int, got bool"):
        Target({"kind": "testgpu", "max_num_threads": True})
    with pytest.raises(TargetError, match="not valid"):
        Target('{"kind": ')
    with pytest.raises(TargetError, match="no 'kind'"):
        Target({})


def test_duplicate_kind_registration_is_refused(kind):
    with pytest.raises(TargetError, match="already registered"):
        nnplug.register_target_kind("testgpu", "opencl")
