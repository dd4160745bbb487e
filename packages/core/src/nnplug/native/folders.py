"""Native libraries in folders: which folders, which files in which order, what is reported.

One scan for native backends and custom-op libraries alike, used by the Runtime and by
``nnplug doctor``. A folder option (``CreationOptions.dynamic_backends_path`` /
``custom_op_paths``) is a ``:``-separated string or a list; None means its environment
variable, else the default folder beside the installed core (which need not exist). Entries
that are relative, missing or not folders are skipped with a LoadError (stage ``path``). In
each folder the files whose names fit the kind are taken in sorted order, each real file once
(the first name wins); a dangling link or a non-file is a LoadError (stage ``file``). A file
that fails to load is reported and skipped: it never stops the scan.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import ArgumentTypeError, NnplugError
from ..plugins import LoadError

_CORE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BACKEND_ENV_VAR = "NNPLUG_BACKEND_PATH"
OP_ENV_VAR = "NNPLUG_CUSTOM_OP_PATH"


def default_backend_dir() -> str:
    """The ``backends/`` folder inside the installed nnplug package: where native backends
    are looked for when neither the option nor NNPLUG_BACKEND_PATH names folders. nnplug
    ships it empty, i.e. not at all: a missing default folder is normal and not reported."""
    return os.path.join(_CORE, "backends")


def default_op_dir() -> str:
    """The ``ops/`` folder inside the installed nnplug package: the custom-op libraries'
    default, as :func:`default_backend_dir` is the backends' (it need not exist either)."""
    return os.path.join(_CORE, "ops")


@dataclass(frozen=True)
class LibraryKind:
    """What a kind of folder holds, and how its option is named."""

    what: str
    """The library, as messages name it ("backend", "op library")."""
    folder: str
    """Its folders, as messages name them."""
    option: str
    """The CreationOptions field that lists the folders."""
    env_var: str
    """The environment variable used when the option is None."""
    default_dir: Callable[[], str]
    file_name: re.Pattern
    """The names of the files that are candidates."""
    pattern: str | None = None
    """The file names as shown to users, when they are narrower than ``*.so``."""


BACKENDS = LibraryKind("backend", "backends folder", "dynamic_backends_path",
                       BACKEND_ENV_VAR, default_backend_dir, re.compile(r".*\.so(\.\d+)*$"))
OP_LIBRARIES = LibraryKind("op library", "custom-op folder", "custom_op_paths",
                           OP_ENV_VAR, default_op_dir,
                           re.compile(r"libnnplug_op_.*\.so\Z"), "libnnplug_op_*.so")


class Candidate(NamedTuple):
    """A file of a folder: to load, or (``error`` set) found but not loadable."""

    path: str
    error: LoadError | None = None


class Folder(NamedTuple):
    path: str
    candidates: list[Candidate]
    """In load order."""
    error: LoadError | None = None
    """Set when the folder cannot be listed (stage ``path``)."""


def search_dirs(kind: LibraryKind, option=None) -> tuple[list[str], list[LoadError]]:
    """The folders to scan, and one LoadError (stage ``path``) per entry that was skipped.
    An empty string or list gives none."""
    if option is None:
        env = os.environ.get(kind.env_var)
        if env is None:
            # The default folder usually does not exist: that is not worth a warning.
            d = kind.default_dir()
            return ([d] if os.path.isdir(d) else []), []
        entries, origin = env.split(":"), kind.env_var
    elif isinstance(option, (str, bytes, os.PathLike)):
        entries, origin = os.fsdecode(os.fspath(option)).split(":"), kind.option
    else:
        try:
            entries = [os.fsdecode(os.fspath(p)) for p in option]
        except TypeError:
            raise ArgumentTypeError(
                f"{kind.option} must be a ':'-separated string or a list of paths, "
                f"not {option!r}"
            ) from None
        origin = kind.option
    dirs, errors, seen = [], [], set()
    for entry in entries:
        if not entry or entry in seen:
            continue
        seen.add(entry)
        source = f"{origin} entry {entry!r}"
        if not os.path.isabs(entry):
            errors.append(LoadError(source, "path", "relative path ignored",
                                    f"use an absolute path, e.g. {os.path.abspath(entry)!r}"))
        elif not os.path.exists(entry):
            errors.append(LoadError(source, "path", "no such folder",
                                    "create the folder or remove it from the path"))
        elif not os.path.isdir(entry):
            errors.append(LoadError(source, "path", "not a folder",
                                    "list the folder that contains the .so, not the file"))
        else:
            dirs.append(entry)
    return dirs, errors


def scan(kind: LibraryKind, dirs) -> list[Folder]:
    """Each folder of ``dirs`` with its candidates; a real file listed under two names (or in
    two folders) is a candidate once, under its first name."""
    folders, seen = [], set()
    for d in dirs:
        try:
            names = sorted(os.listdir(d))
        except OSError as e:
            folders.append(Folder(d, [], LoadError(d, "path",
                                                   f"cannot list folder: {e.strerror or e}",
                                                   "check the folder's permissions")))
            continue
        candidates = []
        for name in names:
            if not kind.file_name.match(name):
                continue
            path = os.path.join(d, name)
            if os.path.islink(path) and not os.path.exists(path):
                candidates.append(Candidate(path, LoadError(
                    path, "file", f"dangling symbolic link to {os.readlink(path)!r}",
                    "fix or remove the link")))
                continue
            if not os.path.isfile(path):
                candidates.append(Candidate(path, LoadError(
                    path, "file", "not a regular file",
                    f"rename it or move it out of the {kind.folder}")))
                continue
            real = os.path.realpath(path)
            if real in seen:
                continue
            seen.add(real)
            candidates.append(Candidate(path))
        folders.append(Folder(d, candidates))
    return folders


def _load_error(path: str, e: Exception) -> LoadError:
    """How a library that failed to load or register is reported: the error's stage, reason
    and fix where it has them (LibraryLoadError), else stage ``register``."""
    stage = getattr(e, "stage", None) or "register"
    reason = getattr(e, "reason", None)
    if reason is None:
        reason = str(e) if isinstance(e, NnplugError) else f"{type(e).__name__}: {e}"
    return LoadError(path, stage, reason, getattr(e, "fix", None))


def load_folders(kind: LibraryKind, option, load: Callable[[str], object],
                 report: Callable[[LoadError], None],
                 on_folder: Callable[[Folder], None] | None = None) -> None:
    """Scan the folders of ``option`` and ``load`` each candidate in order; every skipped
    entry and every failure goes to ``report`` (never raised: a broken file never stops
    the scan). ``on_folder`` is told of each folder before its files are loaded."""
    dirs, errors = search_dirs(kind, option)
    for e in errors:
        report(e)
    for folder in scan(kind, dirs):
        if on_folder is not None:
            on_folder(folder)
        if folder.error is not None:
            report(folder.error)
        for c in folder.candidates:
            if c.error is not None:
                report(c.error)
                continue
            try:
                load(c.path)
            except Exception as e:  # a broken library must never stop the scan
                report(_load_error(c.path, e))


# -- the backends' names for the two steps (nnplug.native exports them) ------------------------
def backend_search_dirs(option=None) -> tuple[list[str], list[LoadError]]:
    """:func:`search_dirs` for ``CreationOptions.dynamic_backends_path``."""
    return search_dirs(BACKENDS, option)


def find_backend_libraries(dirs) -> tuple[list[str], list[LoadError]]:
    """Candidate backend files in ``dirs`` (``*.so`` / ``*.so.N...``), sorted per folder,
    deduplicated by real path, and the LoadErrors of the folders and files that cannot be."""
    found, errors = [], []
    for folder in scan(BACKENDS, dirs):
        if folder.error is not None:
            errors.append(folder.error)
        for c in folder.candidates:
            if c.error is None:
                found.append(c.path)
            else:
                errors.append(c.error)
    return found, errors
