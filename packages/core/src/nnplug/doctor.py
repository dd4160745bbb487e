"""``nnplug doctor [--path DIR ...] [--op-path DIR ...] [--no-entry-points] [--isolate] [MODEL]``:
why a backend or custom op is or is not used. For every folder and file on the native backend
path and on the custom-op path: found / not loadable (why) / loaded but not registered (why) /
registered; installed (entry point) backends; with MODEL, which nodes each backend runs and
which none can. ``--isolate`` loads each native library in a child process first, so that one
that crashes is reported instead of ending the check. Every failure comes with its usual fix.
Exit status 1 when anything failed."""

from __future__ import annotations

import argparse
import os
import sys

from . import discovery
from ._version import __version__
from .native import abi
from .native.folders import (
    BACKEND_ENV_VAR,
    BACKENDS,
    OP_ENV_VAR,
    OP_LIBRARIES,
    LibraryKind,
    default_backend_dir,
    default_op_dir,
    load_folders,
)
from .native.loader import LibraryLoadError, load_backend_library

# stage -> the category
NOT_LOADABLE = {"not found", "file", "not loadable", "no entry symbol", "abi version",
                "invalid table", "invalid library", "invalid op", "crashed", "probe"}
NOT_REGISTERED = {"invalid id", "duplicate id", "device type clash", "init", "register",
                  "duplicate op"}


class _Report:
    def __init__(self, out):
        self.out = out
        self.problems = 0

    def line(self, text="", indent=0):
        print("  " * indent + text, file=self.out)

    def problem(self, text, fix=None, indent=0):
        self.problems += 1
        self.line(text, indent)
        if fix:
            self.line(f"fix: {fix}", indent + 2)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nnplug doctor",
        description="Check native backend folders, installed backends and (optionally) which "
                    "backend runs each node of a model.")
    p.add_argument("--path", action="append", metavar="DIR",
                   help=f"a native backend folder (repeatable; ':'-separated lists allowed). "
                        f"Default: ${BACKEND_ENV_VAR}, else {default_backend_dir()}")
    p.add_argument("--op-path", action="append", metavar="DIR",
                   help="a native custom-op folder (repeatable; ':'-separated lists allowed). "
                        "Default: $NNPLUG_CUSTOM_OP_PATH, else the ops/ folder beside the core")
    p.add_argument("--no-entry-points", action="store_true",
                   help="do not load installed (entry point) backends")
    p.add_argument("--isolate", action="store_true",
                   help="load each native library in a child process first: one that crashes "
                        "or aborts is reported as 'crashed' instead of ending the check")
    p.add_argument("model", nargs="?", help="an ONNX model to place on the backends")
    return p


def _category(stage: str) -> str:
    if stage in NOT_REGISTERED:
        return "loaded but not registered"
    if stage == "path":
        return "skipped"
    return "found but not loadable"


def _no_folders(rep: _Report, default: str | None) -> None:
    if default is None:
        rep.line("(none)", 1)
    else:  # the default folder is only a place one may create; nnplug ships none
        rep.line(f"{default}: does not exist (that is fine: nothing is loaded from it; create "
                 f"it to drop libraries in)", 1)


def _scan(rep: _Report, kind: LibraryKind, heading: str, option, origin: str, isolate: bool,
          default: str | None, load) -> None:
    """The folders of ``kind`` and their files, scanned and loaded one by one as a Runtime
    does (:func:`nnplug.native.folders.load_folders`); ``load(path)`` loads one file and
    returns what its "registered" line says. ``default``: the default folder, when it is
    the one in use."""
    rep.line(f"{heading} ({origin}):")
    found = []

    def on_folder(folder) -> None:
        found.append(folder)
        count = sum(c.error is None for c in folder.candidates)
        pattern = f" ({kind.pattern})" if kind.pattern else ""
        rep.line(f"{folder.path}: {count} candidate file(s){pattern}", 1)

    def report(e) -> None:
        found.append(e)
        if e.stage == "path":
            rep.problem(f"{e.source}: skipped: {e.reason}", e.fix, 1)
        else:
            rep.problem(f"{os.path.basename(e.source)}: {_category(e.stage)}: {e.stage}: "
                        f"{e.reason}", e.fix, 2)

    def load_one(path: str) -> None:
        if isolate:
            from .native.probe import probe

            probe(path, kind.what)
        rep.line(f"{os.path.basename(path)}: registered: {load(path)}", 2)

    load_folders(kind, option, load_one, report, on_folder)
    if not found:
        _no_folders(rep, default)


def _scan_backends(rep: _Report, option, origin: str, isolate: bool = False,
                   default: str | None = None) -> dict:
    """Native backend folders. Returns id -> backend."""
    loaded = {}

    def load(path: str) -> str:
        backend = load_backend_library(path, taken={k: v.path for k, v in loaded.items()})
        loaded[backend.id] = backend
        ver = ".".join(map(str, backend.abi_version))
        return (f"backend {backend.id!r} (device {_device_name(backend)}, version "
                f"{backend.version or '?'}, ABI {ver})")

    _scan(rep, BACKENDS, "Native backend folders", option, origin, isolate, default, load)
    return loaded


def _scan_ops(rep: _Report, option, origin: str, isolate: bool,
              default: str | None = None) -> None:
    """Custom-op folders and their ``libnnplug_op_*.so`` files."""
    from .native.op_library import load_op_library

    seen: dict[str, str] = {}

    def load(path: str) -> str:
        ops = load_op_library(path)
        dup = [op.op_type for op in ops if op.op_type in seen]
        if dup:
            raise LibraryLoadError(path, "duplicate op",
                                   f"{dup[0]!r} is already registered from {seen[dup[0]]}",
                                   "each op type can be registered once: remove one of the two")
        for op in ops:
            seen[op.op_type] = path
        return ", ".join(op.describe() for op in ops)

    _scan(rep, OP_LIBRARIES, "Custom-op folders", option, origin, isolate, default, load)


def _device_name(backend) -> str:
    from .device import device_type_name

    return device_type_name(backend.device_type_number)


def _entry_points(rep: _Report, isolate: bool = False):
    from .runtime import CreationOptions, Runtime

    rep.line("Installed backends (entry points):")
    rt = Runtime(CreationOptions(dynamic_backends_path="", custom_op_paths="",
                                 isolate_native=isolate))
    for info in rt.backends.values():
        rep.line(f"{info.id}: registered ({info.device_type}) from {info.source}", 1)
    for e in rt.load_errors:
        rep.problem(f"{e.source}: not registered: {e.stage}: {e.reason}", e.fix, 1)
    if not rt.backends and not rt.load_errors:
        rep.line("(none)", 1)
    return rt


def _shadowed(rep: _Report, loaded: dict, rt) -> None:
    """Folder libraries whose id an installed package (entry point) registers: a Runtime
    registers the package's and refuses the file ("duplicate id")."""
    for bid, backend in loaded.items():
        info = rt.backends.get(bid)
        if info is not None:
            rep.problem(
                f"{os.path.basename(backend.path)}: backend {bid!r} is also installed ({info.source}); "
                f"a Runtime registers the installed one and refuses this file (duplicate id)",
                f"remove one of the two, or, to use the file, disable the entry point with "
                f"{discovery.DISABLE_ENV}={info.source.split(' = ')[0].split(':')[-1]}", 1)


def _model(rep: _Report, path: str, backends: list) -> None:
    from .errors import NnplugError
    from .graph import whole_graph
    from .stages.loader import load
    from .static_shapes import FIX, reason, static_shapes_only

    rep.line(f"Model {path}:")
    try:
        model = load(path)
    except (NnplugError, OSError) as e:
        rep.problem(f"cannot load the model: {e}", "check the file with onnx.checker", 1)
        return
    graph = whole_graph(model, model.nodes, model.constants)
    runs: dict[str, list] = {b.id: [] for b in backends}
    nobody = []
    for node in model.nodes:
        chosen = None
        for b in backends:
            try:
                if b.supports(node, graph):
                    chosen = b
                    break
                why = static_shapes_only(b, node, graph)
                if why:  # it would run the node but for the shapes: the user should know
                    rep.problem(reason(b, node, why), FIX, 1)
            except Exception as e:  # noqa: BLE001 - a broken supports() is itself a finding
                rep.problem(f"backend {b.id!r}: supports() failed on {node.describe()}: {e}",
                            "report it to the backend's authors", 1)
        if chosen is None:
            nobody.append(node)
        else:
            runs[chosen.id].append(node)
    for b in backends:
        names = runs[b.id]
        if names:
            shown = ", ".join(f"{n.name} ({n.op_type})" for n in names[:12])
            more = f" and {len(names) - 12} more" if len(names) > 12 else ""
            rep.line(f"backend {b.id!r} runs {len(names)} node(s): {shown}{more}", 1)
        else:
            rep.line(f"backend {b.id!r}: registered but runs no node of this model "
                     f"(earlier backends in the preference list take them, or it supports none)",
                     1)
    if nobody:
        ops = sorted({n.qualified_type for n in nobody})
        rep.problem(
            f"no backend can run {len(nobody)} node(s): "
            + ", ".join(f"{n.name} ({n.op_type})" for n in nobody[:12]),
            f"install or build a backend (or custom op) that implements {', '.join(ops)}", 1)


def doctor_main(argv=None, out=None) -> int:
    out = out or sys.stdout
    args = _parser().parse_args(argv)
    rep = _Report(out)
    rep.line(f"nnplug {__version__}, native backend ABI {'.'.join(map(str, abi.ABI_VERSION))}")
    default = None
    if args.path:
        option, origin = discovery.absolute_paths(":".join(args.path)), "from --path"
    elif os.environ.get(BACKEND_ENV_VAR) is not None:
        option, origin = None, f"from {BACKEND_ENV_VAR}"
    else:
        default = default_backend_dir()
        option, origin = None, "the default folder"
    loaded = _scan_backends(rep, option, origin, args.isolate, default)
    op_default = None
    if args.op_path:
        op_option, op_origin = discovery.absolute_paths(":".join(args.op_path)), "from --op-path"
    elif os.environ.get(OP_ENV_VAR) is not None:
        op_option, op_origin = None, f"from {OP_ENV_VAR}"
    else:
        op_default = default_op_dir()
        op_option, op_origin = None, "the default folder"
    _scan_ops(rep, op_option, op_origin, args.isolate, op_default)
    rt = None
    try:
        backends = list(loaded.values())
        if not args.no_entry_points:
            rt = _entry_points(rep, args.isolate)
            _shadowed(rep, loaded, rt)
            # as a Runtime places them: the installed package's backend, not the folder copy
            backends = [b for b in backends if b.id not in rt.backends]
            backends += [i.backend for i in rt.backends.values()]
        if args.model:
            _model(rep, args.model, backends)
    finally:
        if rt is not None:
            rt.close()
        for b in loaded.values():
            b.close()
    rep.line()
    rep.line("OK: no problems found" if not rep.problems else
             f"{rep.problems} problem(s) found")
    return 1 if rep.problems else 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(doctor_main())
