"""``import nnplug`` and ``nnplug.Runtime()`` leave onnx and ml_dtypes unimported (they take
longer to import than the rest of nnplug together): the pipeline's stages import them when a
model is first loaded. Each check runs in a fresh interpreter, with whatever plugins this
environment has installed (every in-tree one in the isolation session)."""

import json
import subprocess
import sys

HEAVY = ("onnx", "ml_dtypes")


def modules_after(code: str) -> set[str]:
    """The top-level modules imported by a fresh interpreter that ran ``code``."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return {m.partition(".")[0] for m in json.loads(done.stdout.splitlines()[-1])}


def test_import_nnplug_and_runtime_do_not_import_onnx():
    found = modules_after("import nnplug\nrt = nnplug.Runtime()\nrt.backends\nrt.ops")
    assert "nnplug" in found
    assert not found & set(HEAVY), f"imported at start-up: {sorted(found & set(HEAVY))}"


def test_the_session_api_starts_without_onnx():
    found = modules_after("import nnplug as ort\nort.get_available_providers()\n"
                          "ort.SessionOptions()")
    assert "onnx" not in found


def test_loading_a_model_imports_onnx():
    """The other side of the checks above: they would see onnx if it were imported."""
    found = modules_after(
        "import nnplug, nnplug.demo\n"
        "try:\n"
        "    nnplug.Runtime(nnplug.CreationOptions.isolated()).load(nnplug.demo.MODEL)\n"
        "except nnplug.UnsupportedNodeError:\n"
        "    pass  # no backend registered: the model was read and checked all the same\n")
    assert "onnx" in found
