"""What the scaffold tests that build generated native packages share: a folder holding a
wheel of nnplug-build-hook, the build requirement of every native package, which is not on
PyPI yet. Built once per run from the monorepo's packages/build-hook."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BUILD_HOOK = Path(__file__).resolve().parents[3] / "build-hook"


@pytest.fixture(scope="session")
def build_hook_wheelhouse(tmp_path_factory) -> str:
    if not (BUILD_HOOK / "pyproject.toml").is_file():
        pytest.skip(f"needs nnplug's checkout: no {BUILD_HOOK} to build nnplug-build-hook from")
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out),
                    str(BUILD_HOOK)], check=True, timeout=600)
    return str(out)


@pytest.fixture(scope="session")
def build_hook_find_links(build_hook_wheelhouse) -> str:
    """PIP_FIND_LINKS for pip's isolated builds: the machine's own find-links (if any) and
    the wheelhouse."""
    return " ".join(p for p in (os.environ.get("PIP_FIND_LINKS", ""), build_hook_wheelhouse) if p)
