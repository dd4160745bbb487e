"""A native backend's table declares its rank (ABI 1.5): priority and provider names."""

import pytest
from nativelib import bare_runtime, compile_backend

import nnplug


def test_native_tables_declare_priority_and_provider_names(tmp_path):
    def build(ident, *flags):
        return compile_backend("testbackend.c", str(tmp_path / f"libnnplug_{ident}.so"),
                               ["-DTB_HOST_VISIBLE=1", f'-DTB_ID="{ident}"', *flags])

    ranked = build("ranked", "-DTB_PRIORITY=300",
                   '-DTB_PROVIDER_NAMES="FooExecutionProvider, BarExecutionProvider"')
    # a 1.4 table with the members set: a table of that minor does not carry them
    older = build("older", "-DTB_ABI_MINOR=4", "-DTB_PRIORITY=900")
    bad = build("badnames", '-DTB_PROVIDER_NAMES="Foo ExecutionProvider"')
    with bare_runtime() as rt:
        r = rt.register_backend(ranked).backend
        assert (r.priority, r.provider_names) == (300, ("FooExecutionProvider",
                                                         "BarExecutionProvider"))
        o = rt.register_backend(older).backend
        assert (o.priority, o.provider_names) == (0, ())
        assert rt.default_backends() == ["ranked", "older"]
        with pytest.raises(nnplug.PluginError, match="provider_names.*'Foo ExecutionProvider'"):
            rt.register_backend(bad)
