"""Fill a template folder into a new package.

Template files end in ``.tmpl``; in names and contents ``@@KEY@@`` is replaced by the spec's
values (``@@NAME@@``, ``@@PACKAGE@@``, ``@@DIST@@``, ...). A path segment ``__package__``
becomes the import package name. ``templates/<kind>/`` holds a kind's own files and
``templates/common/`` what every kind gets; a kind's own file wins over a shared one of the
same name. The native kinds build with nnplug-build-hook (``BUILD_HOOK_REQUIREMENT``) and get
a copy of this nnplug's C headers.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import resources

from .. import __version__

BACKEND_ID_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
OP_TYPE_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")
KINDS = {"backend-python", "backend-native", "op", "op-native"}
NATIVE_KINDS = {"backend-native", "op-native"}
BUILD_HOOK_REQUIREMENT = "nnplug-build-hook>=0.1"
"""The build requirement of native packages: the hatchling hook ``nnplug-native``."""


class ScaffoldError(ValueError):
    """A name or folder ``nnplug new`` cannot use; the message says why and what to do."""


def _reserved_ids() -> set[str]:
    from ..plugins import RESERVED_IDS

    return set(RESERVED_IDS)


@dataclass
class Spec:
    kind: str  # "backend-python", "backend-native", "op" or "op-native"
    name: str  # backend id, or op type
    directory: str

    @property
    def short(self) -> str:
        return self.name.lower()

    @property
    def dist(self) -> str:
        prefix = "nnplug-ops-" if self.kind.startswith("op") else "nnplug-backend-"
        return prefix + self.short.replace("_", "-")

    @property
    def package(self) -> str:
        return self.dist.replace("-", "_")

    @property
    def class_name(self) -> str:
        return "".join(p[:1].upper() + p[1:] for p in self.name.split("_") if p)

    def values(self) -> dict[str, str]:
        major, minor = __version__.split(".")[:2]
        return {
            "NAME": self.name,
            "SHORT": self.short,
            "DIST": self.dist,
            "PACKAGE": self.package,
            "CLASS": self.class_name,
            "NNPLUG_REQUIREMENT": f"nnplug>={major}.{minor}",
            "BUILD_HOOK_REQUIREMENT": BUILD_HOOK_REQUIREMENT,
            "LIBRARY": f"libnnplug_backend_{self.short}.so",
            # custom-op folders load only files named libnnplug_op_*.so
            "OP_LIBRARY": f"libnnplug_op_{self.short}.so",
        }


def check_backend_id(name: str) -> str:
    if not BACKEND_ID_RE.match(name or ""):
        raise ScaffoldError(
            f"backend name {name!r} is not a valid backend id: use 1-32 characters of lower-case "
            f"letters, digits and '_', starting with a letter (e.g. 'mynpu')"
        )
    if name in _reserved_ids():
        raise ScaffoldError(
            f"backend name {name!r} is reserved (reserved: {', '.join(sorted(_reserved_ids()))}); "
            f"pick another"
        )
    return name


def check_op_type(name: str) -> str:
    if not OP_TYPE_RE.match(name or ""):
        raise ScaffoldError(
            f"op name {name!r} is not a valid op type: use letters, digits and '_', starting with a "
            f"letter (e.g. 'MySwish')"
        )
    import onnx.defs

    if onnx.defs.has(name, ""):
        raise ScaffoldError(
            f"op name {name!r} is a standard ONNX operator; generate the package under another "
            f"name, then set `override = True` and `op_type = {name!r}` in its op class to "
            f"replace the backends' kernel (see docs/custom-ops.md)"
        )
    return name


def check_directory(path: str) -> str:
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ScaffoldError(f"{path!r} exists and is not a folder; give a new folder")
        if os.listdir(path):
            raise ScaffoldError(f"folder {path!r} is not empty; give a new or empty folder")
    return path


def template_root():
    return resources.files("nnplug.scaffold") / "templates"


def _walk(node, rel=""):
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        path = f"{rel}/{child.name}" if rel else child.name
        if child.is_dir():
            if child.name != "__pycache__":
                yield from _walk(child, path)
        elif child.name.endswith(".tmpl"):
            yield path, child


def _fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace(f"@@{key}@@", value)
    left = re.search(r"@@[A-Z_]+@@", text)
    if left:
        raise RuntimeError(f"template placeholder {left.group(0)} has no value")
    return text


def generate(spec: Spec) -> list[str]:
    """Write the package; returns the files written (relative to ``spec.directory``)."""
    if spec.kind not in KINDS:
        raise ScaffoldError(f"unknown template {spec.kind!r}; one of {', '.join(sorted(KINDS))}")
    values = spec.values()
    roots = ["common", spec.kind]
    by_path = {}
    for root in roots:  # later roots win: a kind's own file over a shared one
        for rel, res in _walk(template_root() / root):
            by_path[rel[: -len(".tmpl")].replace("__package__", spec.package)] = res
    written = []
    files = sorted(by_path.items())
    check_directory(spec.directory)
    for rel, res in files:
        target = os.path.join(spec.directory, _fill(rel, values))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8", newline="\n") as f:
            f.write(_fill(res.read_text(encoding="utf-8"), values))
        written.append(os.path.relpath(target, spec.directory))
    if spec.kind in NATIVE_KINDS:
        written += _vendor_headers(spec.directory)
    return written


def _vendor_headers(directory: str) -> list[str]:
    """Copy this nnplug's C headers into a native package, so it builds against the ABI it
    was written for without nnplug in the build environment (pip's isolated build, its sdist)."""
    from .. import get_include

    include = os.path.join(get_include(), "nnplug")
    copies = [(os.path.join(include, h), os.path.join("include", "nnplug", h))
              for h in sorted(os.listdir(include)) if h.endswith(".h")]
    for src, rel in copies:
        os.makedirs(os.path.join(directory, os.path.dirname(rel)), exist_ok=True)
        shutil.copyfile(src, os.path.join(directory, rel))
    return [rel for _, rel in copies]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nnplug new",
        description="Generate an out-of-tree nnplug plugin package that builds, installs, is "
                    "found by `nnplug info` and passes its own tests as generated.",
        usage="nnplug new {backend,op} NAME [DIR] [--native|--python]")
    p.add_argument("what", choices=("backend", "op"), help="what to generate")
    return p


def _kind_parser(what: str) -> argparse.ArgumentParser:
    """``nnplug new backend`` / ``nnplug new op``: its own usage in its own errors."""
    noun = {"backend": "backend id, e.g. mynpu ([a-z][a-z0-9_]*)", "op": "op type, e.g. MySwish"}
    default = {"backend": "./nnplug-backend-NAME", "op": "./nnplug-ops-NAME"}
    p = argparse.ArgumentParser(prog=f"nnplug new {what}",
                                description=f"Generate a {what} package.")
    p.add_argument("name", metavar="NAME", help=f"the {noun[what]}")
    p.add_argument("directory", metavar="DIR", nargs="?",
                   help=f"where to create it (must not exist or be empty; default {default[what]})")
    lang = p.add_mutually_exclusive_group()
    lang.add_argument("--python", dest="native", action="store_false",
                      help="kernels in Python/numpy (the default)")
    lang.add_argument("--native", dest="native", action="store_true",
                      help="kernels in C against nnplug's ABI, built by nnplug's build hook")
    p.set_defaults(native=False)
    return p


def _next_steps(spec: Spec) -> list[str]:
    """What to do next; the same commands as the package's README and docs/authoring.md."""
    rebuild = ["  (Python edits count at once; after editing C sources run pip install -e . "
               "again: it recompiles)"] if spec.kind in NATIVE_KINDS else \
        ["  (edit, then rerun pytest: nothing to reinstall)"]
    return [f"  cd {spec.directory}", "  pip install -e .     # editable: your edits are what runs",
            "  nnplug info          # lists it",
            "  pytest               # its own tests, then the conformance suite",
            "  (the tests need the test extra once: pip install -e \".[test]\" brings pytest and "
            "nnplug-conformance)",
            *rebuild,
            "(docs: README.md in the package, and nnplug's docs/authoring.md)"]


def new_main(argv=None) -> int:
    """``nnplug new backend NAME [DIR] [--native|--python]`` / ``nnplug new op NAME [DIR]``
    (options anywhere after the kind)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0 if argv else 2
    what = parser.parse_args(argv[:1]).what
    args = _kind_parser(what).parse_intermixed_args(argv[1:])
    try:
        if args.name in ("native", "python"):
            raise ScaffoldError(f"{args.name!r} is not a name for the {what}: the language is "
                                f"an option, e.g. nnplug new {what} NAME --{args.name}")
        if what == "backend":
            name = check_backend_id(args.name)
            kind = "backend-native" if args.native else "backend-python"
        else:
            name = check_op_type(args.name)
            kind = "op-native" if args.native else "op"
        spec = Spec(kind, name, "")
        spec.directory = args.directory or spec.dist
        check_directory(spec.directory)
        files = generate(spec)
    except ScaffoldError as e:
        print(f"nnplug new: error: {e}", file=sys.stderr)
        return 1
    what = {"backend-python": "Python backend", "backend-native": "native backend",
            "op": "custom op", "op-native": "native custom op"}[kind]
    print(f"created {spec.dist} ({what} {name!r}) in {spec.directory}/: {len(files)} files")
    for f in files:
        print(f"  {f}")
    print("next:")
    for line in _next_steps(spec):
        print(line)
    return 0
