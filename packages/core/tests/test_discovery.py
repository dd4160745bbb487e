"""Entry-point discovery against real distributions installed into a temporary path."""

import logging
import re
import textwrap

import numpy as np
import pytest
from models import mlp, with_custom_op

import nnplug

BACKEND_MODULE = '''
import numpy_backend

class Good(numpy_backend.NumpyBackend):
    id = "goodplug"

def factory():
    return numpy_backend.NumpyBackend(id="factoryplug")

instance = numpy_backend.NumpyBackend(id="instanceplug")

def raises():
    raise RuntimeError("no device here")

def wrong():
    return 42
'''

BROKEN_MODULE = "raise ImportError('libfoo.so.1: cannot open shared object file')\n"

OPS_MODULE = '''
import numpy as np

class Scale:
    op_type = "cstScale"
    def shape_infer(self, node, in_shapes, in_dtypes):
        return [in_shapes[0]], [in_dtypes[0]]
    def compute(self, node, inputs):
        return [inputs[0] * np.float32(node.attrs.get("scale", 1.0))]

def register(rt):
    rt.register_custom_op(Scale())
'''


def install_dist(root, name, entry_points: dict[str, list[str]], modules: dict[str, str]):
    """Write a real (metadata-only) installed distribution under ``root``."""
    # the folder name as installers write it (normalised, '-' -> '_'): importlib.metadata
    # finds a distribution by that name, not by the Name inside METADATA
    info = root / f"{re.sub(r'[-_.]+', '_', name).lower()}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(eps)
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    for mod, src in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(src))


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("NNPLUG_DISABLE_PLUGINS", raising=False)
    return tmp_path


def runtime(**kw):
    return nnplug.Runtime(nnplug.CreationOptions(dynamic_backends_path="", custom_op_paths="", **kw))


def test_good_plugins_load_and_bad_ones_are_reported_and_skipped(site, caplog):
    install_dist(site, "nnplug-test-plugins", {"nnplug.backends": [
        "goodplug = plug_backends:Good",
        "factoryplug = plug_backends:factory",
        "instanceplug = plug_backends:instance",
        "raisesplug = plug_backends:raises",
        "wrongplug = plug_backends:wrong",
        "brokenplug = plug_broken:Anything",
        "missingplug = plug_nowhere:Thing",
    ]}, {"plug_backends": BACKEND_MODULE, "plug_broken": BROKEN_MODULE})
    with caplog.at_level(logging.WARNING, logger="nnplug"):
        rt = runtime()
    for bid in ("goodplug", "factoryplug", "instanceplug"):
        info = rt.backends[bid]
        assert info.origin == "entry_point"
        assert "nnplug-test-plugins 1.0" in info.source and info.version == "1.0"
    errors = {e.source.split(" = ")[0].split(":")[1]: e for e in rt.load_errors}
    assert set(errors) == {"raisesplug", "wrongplug", "brokenplug", "missingplug"}
    assert "no device here" in errors["raisesplug"].reason
    assert errors["wrongplug"].stage == "type" and "expected a nnplug.Backend" in errors["wrongplug"].reason
    assert errors["brokenplug"].stage == "import" and "libfoo.so.1" in errors["brokenplug"].reason
    assert errors["missingplug"].stage == "import"
    logged = caplog.text
    for name in errors:
        assert name in logged
    # the runtime works as usual with the good ones
    x = np.ones((2, 4), np.float32)
    assert rt.load(mlp(), backends=["goodplug"]).run({"x": x})["y"].shape == (2, 3)
    rt.close()


def test_env_var_disables_named_plugins_without_importing_them(site, monkeypatch):
    install_dist(site, "nnplug-test-disabled", {"nnplug.backends": [
        "goodplug = plug_backends:Good", "brokenplug = plug_broken:Anything"]},
        {"plug_backends": BACKEND_MODULE, "plug_broken": BROKEN_MODULE})
    monkeypatch.setenv("NNPLUG_DISABLE_PLUGINS", "brokenplug, goodplug")
    rt = runtime()
    assert "goodplug" not in rt.backends
    assert not rt.load_errors
    assert "nnplug.backends:brokenplug" in rt.disabled
    rt.close()


def test_entry_points_can_be_switched_off_entirely(site):
    install_dist(site, "nnplug-test-off", {"nnplug.backends": ["goodplug = plug_backends:Good"]},
                 {"plug_backends": BACKEND_MODULE})
    rt = runtime(entry_points=False)
    assert rt.backends == {} and rt.load_errors == []
    rt.close()


def test_op_entry_points_register_custom_ops(site):
    install_dist(site, "nnplug-test-ops", {
        "nnplug.backends": ["goodplug = plug_backends:Good"],
        "nnplug.ops": ["scale = plug_ops:register", "broken = plug_broken:X"]},
        {"plug_backends": BACKEND_MODULE, "plug_ops": OPS_MODULE, "plug_broken": BROKEN_MODULE})
    rt = runtime()
    assert "nnplug.ops:scale" in rt.ops["cstScale"].source
    assert "nnplug-test-ops 1.0" in rt.ops["cstScale"].source
    assert [e.stage for e in rt.load_errors] == ["import"]
    net = rt.load(with_custom_op())
    x = np.ones((2, 2), np.float32)
    np.testing.assert_allclose(net.run({"x": x})["y"], 1 / (1 + np.exp(-2.0 * x)), rtol=1e-6)
    rt.close()


def test_two_runtimes_share_one_plugin_backend(site):
    install_dist(site, "nnplug-test-shared", {"nnplug.backends": ["goodplug = plug_backends:Good"]},
                 {"plug_backends": BACKEND_MODULE})
    a, b = runtime(), runtime()
    assert a.backends["goodplug"].backend is b.backends["goodplug"].backend
    a.close()
    assert "target.build.goodplug" in nnplug.list_funcs()
    b.close()
    assert "target.build.goodplug" not in nnplug.list_funcs()
