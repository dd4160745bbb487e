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
