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
from .native.loader import (
    ENV_VAR,
    LibraryLoadError,
    backend_search_dirs,
    default_backend_dir,
    find_backend_libraries,
    load_backend_library,
)

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
                        f"Default: ${ENV_VAR}, else {default_backend_dir()}")
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


def _probe(rep: _Report, path: str, kind: str, isolate: bool) -> bool:
    """With ``isolate``: whether the library survives loading in a child (else reported)."""
    if not isolate:
        return True
    from .native.probe import probe

    try:
        probe(path, kind)
    except LibraryLoadError as e:
        rep.problem(f"{os.path.basename(path)}: {_category(e.stage)}: {e.stage}: {e.reason}",
                    e.fix, 2)
        return False
    return True


def _no_folders(rep: _Report, default: str | None) -> None:
    if default is None:
        rep.line("(none)", 1)
    else:  # the default folder is only a place one may create; nnplug ships none
        rep.line(f"{default}: does not exist (that is fine: nothing is loaded from it; create "
                 f"it to drop libraries in)", 1)


def _scan(rep: _Report, option, origin: str, isolate: bool = False,
          default: str | None = None) -> dict:
    """Folders and files, loaded one by one exactly as a Runtime would. Returns id -> backend.
    ``default``: the default folder, when it is the one in use."""
    rep.line(f"Native backend folders ({origin}):")
    dirs, errors = backend_search_dirs(option)
    for e in errors:
        rep.problem(f"{e.source}: skipped: {e.reason}", e.fix, 1)
    if not dirs and not errors:
        _no_folders(rep, default)
    loaded = {}
    for d in dirs:
        files, ferrs = find_backend_libraries([d])
        rep.line(f"{d}: {len(files)} candidate file(s)", 1)
        entries = [(p, None) for p in files] + [(e.source, e) for e in ferrs]
        for path, err in sorted(entries, key=lambda pe: os.path.basename(pe[0])):
            if err is not None:
                rep.problem(f"{os.path.basename(path)}: found but not loadable: {err.reason}",
                            err.fix, 2)
                continue
            if not _probe(rep, path, "backend", isolate):
                continue
            try:
                backend = load_backend_library(path, taken={k: v.path for k, v in loaded.items()})
            except LibraryLoadError as e:
                rep.problem(f"{os.path.basename(path)}: {_category(e.stage)}: {e.stage}: "
                            f"{e.reason}", e.fix, 2)
                continue
            loaded[backend.id] = backend
            ver = ".".join(map(str, backend.abi_version))
            rep.line(f"{os.path.basename(path)}: registered: backend {backend.id!r} (device "
                     f"{_device_name(backend)}, version {backend.version or '?'}, ABI {ver})", 2)
    return loaded


def _scan_ops(rep: _Report, option, origin: str, isolate: bool,
              default: str | None = None) -> None:
    """Custom-op folders and their ``libnnplug_op_*.so`` files, loaded one by one."""
    from .native import custom_ops

    rep.line(f"Custom-op folders ({origin}):")
    dirs, errors = custom_ops.op_search_dirs(option)
    for e in errors:
        rep.problem(f"{e.source}: skipped: {e.reason}", e.fix, 1)
    if not dirs and not errors:
        _no_folders(rep, default)
    seen: dict[str, str] = {}
    for d in dirs:
        files, ferrs = custom_ops.find_op_libraries([d])
        rep.line(f"{d}: {len(files)} candidate file(s) ({custom_ops.FILE_PATTERN})", 1)
        for e in ferrs:
            if e.source != d:
                rep.problem(f"{os.path.basename(e.source)}: found but not loadable: {e.reason}",
                            e.fix, 2)
        for path in files:
            name = os.path.basename(path)
            if not _probe(rep, path, "op library", isolate):
                continue
            try:
                ops = custom_ops.load_op_library(path)
            except LibraryLoadError as e:
                rep.problem(f"{name}: {_category(e.stage)}: {e.stage}: {e.reason}", e.fix, 2)
                continue
            dup = [op.op_type for op in ops if op.op_type in seen]
            if dup:
                rep.problem(f"{name}: loaded but not registered: duplicate op: {dup[0]!r} is "
                            f"already registered from {seen[dup[0]]}",
                            "each op type can be registered once: remove one of the two", 2)
                continue
            for op in ops:
                seen[op.op_type] = path
            rep.line(f"{name}: registered: " + ", ".join(op.describe() for op in ops), 2)


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
    from .loader import load
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
    elif os.environ.get(ENV_VAR) is not None:
        option, origin = None, f"from {ENV_VAR}"
    else:
        default = default_backend_dir()
        option, origin = None, "the default folder"
    loaded = _scan(rep, option, origin, args.isolate, default)
    from .native.custom_ops import ENV_VAR as OP_ENV_VAR
    from .native.custom_ops import default_op_dir

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
