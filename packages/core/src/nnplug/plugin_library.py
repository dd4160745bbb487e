"""The native library a plugin package ships beside its Python code, found the same way by
backends (their ``nnplug.backends`` entry point is ``library_path``) and op packages (their
``nnplug.ops`` entry point ``register`` hands it to the Runtime)::

    LIBRARY = "libnnplug_backend_mine.so"

    def library_path() -> str:
        return nnplug.packaged_library(__file__, LIBRARY)

A package installed without its library (no C compiler when it was built, or
``NNPLUG_ALLOW_NO_NATIVE=1``) raises :class:`nnplug.NativeLibraryMissingError` naming the file
and how to rebuild it; a Runtime shows that as the plugin's load error.
"""

from __future__ import annotations

import os

from .errors import NativeLibraryMissingError


def packaged_library(module_file: str, library: str) -> str:
    """The path of ``library`` in the folder of ``module_file`` (the package's ``__file__``);
    NativeLibraryMissingError when the file is not there."""
    folder = os.path.dirname(os.path.abspath(module_file))
    path = os.path.join(folder, library)
    if os.path.isfile(path):
        return path
    dist = _distribution_of(os.path.basename(folder))
    raise NativeLibraryMissingError(
        path,
        f"{path} is missing: {dist} was installed without its native library (its build found "
        f"no C compiler or a header it needs, or ran with NNPLUG_ALLOW_NO_NATIVE=1)",
        f"install a C compiler (e.g. apt install gcc) and rebuild the package: pip install "
        f"--force-reinstall --no-deps --no-binary {dist} {dist} (from a checkout: pip install "
        f"-e <its folder>)")


def _distribution_of(package: str) -> str:
    """The distribution that installs the import package ``package`` (its name with dashes
    when the metadata does not say: editable installs often do not)."""
    from importlib import metadata

    dists = metadata.packages_distributions().get(package) or [package.replace("_", "-")]
    return dists[0]


__all__ = ["packaged_library"]
