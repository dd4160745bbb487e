"""The conformance kit is its own distribution (nnplug-conformance): the core declares no
``pytest11`` entry point, so installing nnplug adds nothing to anyone's pytest, carries no
``nnplug.testing`` package, and ``import nnplug`` (or its CLI) does not import the kit."""

import importlib.util
import json
import subprocess
import sys
from importlib import metadata


def test_the_core_s_metadata_declares_no_pytest_plugin():
    groups = {ep.group for ep in metadata.distribution("nnplug").entry_points}
    assert "pytest11" not in groups, sorted(groups)


def test_the_core_carries_no_conformance_kit():
    assert importlib.util.find_spec("nnplug.testing") is None


def test_import_nnplug_does_not_import_the_kit():
    script = ("import json, sys\nimport nnplug, nnplug.cli, nnplug.demo\nrt = nnplug.Runtime()\n"
              "print(json.dumps(sorted(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    modules = json.loads(done.stdout.splitlines()[-1])
    kit = [m for m in modules if m.partition(".")[0] == "nnplug_conformance"
           or m.startswith("nnplug.testing")]
    assert kit == [], kit
