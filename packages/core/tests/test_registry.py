import pytest

import nnplug
from nnplug import RegistryError


@pytest.fixture
def name():
    n = "test.registry.func"
    yield n
    nnplug.remove_func(n)


def test_register_get_and_list_by_prefix(name):
    @nnplug.register_func(name)
    def f(x):
        return x + 1

    assert nnplug.get_func(name)(1) == 2
    assert name in nnplug.list_funcs("test.registry.")
    assert name not in nnplug.list_funcs("other.")


def test_second_registration_raises_unless_override(name):
    nnplug.register_func(name, lambda: 1)
    with pytest.raises(RegistryError, match="already registered"):
        nnplug.register_func(name, lambda: 2)
    nnplug.register_func(name, lambda: 3, override=True)
    assert nnplug.get_func(name)() == 3


def test_missing_function_names_itself_and_neighbours(name):
    nnplug.register_func(name, lambda: 1)
    with pytest.raises(RegistryError, match="test.registry.nope.*test.registry.func"):
        nnplug.get_func("test.registry.nope")
    assert nnplug.get_func("test.registry.nope", allow_missing=True) is None


def test_non_callable_is_refused(name):
    with pytest.raises(RegistryError, match="not callable"):
        nnplug.register_func(name, 42)


def test_an_owners_withdrawal_shows_again_what_its_entries_hid(name):
    from nnplug import registry

    nnplug.register_func(name, lambda: "api")
    owner = object()
    nnplug.register_func(name, lambda: "plugin", override=True, owner=owner)
    nnplug.register_target_kind("testwithdrawn", "cpu", owner=owner)
    assert nnplug.get_func(name)() == "plugin"
    assert "testwithdrawn" in nnplug.list_target_kinds()
    registry.withdraw(owner)  # one call, every namespace
    assert nnplug.get_func(name)() == "api"
    assert "testwithdrawn" not in nnplug.list_target_kinds()


def test_every_namespace_refuses_a_duplicate_by_one_rule(name):
    nnplug.register_func(name, lambda: 1)
    nnplug.register_target_kind("testduplicate", "cpu")
    try:
        with pytest.raises(RegistryError, match="global function .*already registered"):
            nnplug.register_func(name, lambda: 2)
        with pytest.raises(nnplug.TargetError, match="target kind 'testduplicate' is already"):
            nnplug.register_target_kind("testduplicate", "cpu")
        with pytest.raises(nnplug.InvalidArgumentError, match="already number"):
            nnplug.register_device_type("cpu", 70)
    finally:
        nnplug.target.remove_target_kind("testduplicate")
