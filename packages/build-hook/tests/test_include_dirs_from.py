"""``include_dirs_from`` of the nnplug-native build hook: the include/ folders of installed
distributions (headers shipped as wheels), and a clear error for one that is not installed."""

import os

import pytest

from nnplug_build_hook.native import NativeBuildError, dist_include_dirs


def test_include_folders_of_an_installed_distribution_hold_its_headers():
    dirs = dist_include_dirs(["numpy"])  # numpy's wheel ships its C headers under include/
    assert any(os.path.isfile(os.path.join(d, "numpy", "ndarrayobject.h")) for d in dirs), dirs


def test_a_distribution_that_is_not_installed_fails_naming_the_fix():
    with pytest.raises(NativeBuildError, match="pip install no-such-devel-dist"):
        dist_include_dirs(["no-such-devel-dist"])
