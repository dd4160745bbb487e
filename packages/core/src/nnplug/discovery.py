"""Entry-point discovery: ``nnplug.backends``, ``nnplug.ops`` and ``nnplug.cli``; which
distribution provides each plugin nnplug knows of; folder lists typed on the command line.

Reading entry points only reads package metadata; a plugin's module is imported when
its entry point is loaded, never earlier. ``NNPLUG_DISABLE_PLUGINS`` (comma-separated
entry point names, or ``*``) skips plugins without importing them.
"""

from __future__ import annotations

import os

BACKENDS_GROUP = "nnplug.backends"
OPS_GROUP = "nnplug.ops"
CLI_GROUP = "nnplug.cli"
DISABLE_ENV = "NNPLUG_DISABLE_PLUGINS"

BACKEND_DIST_PREFIX = "nnplug-backend-"
"""How backend distributions are named (``nnplug-backend-<id>``): the core knows no plugin,
only this rule, so its advice for a missing backend follows it."""


def disabled_names(extra=None) -> set[str]:
    names = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return names | set(extra or ())


def entry_points(group: str) -> list:
    """The group's entry points, sorted by name, one per name (first distribution wins)."""
    import importlib_metadata  # here, not at import nnplug: it imports the email package

    seen, out = set(), []
    for ep in sorted(importlib_metadata.entry_points(group=group), key=lambda e: e.name):
        if ep.name not in seen:
            seen.add(ep.name)
            out.append(ep)
    return out


def describe(ep) -> str:
    dist = getattr(ep, "dist", None)
    where = " from {} {}".format(*_name_version(dist)) if dist is not None else ""
    return f"{ep.group}:{ep.name} = {ep.value}{where}"


def dist_name(ep) -> str | None:
    dist = getattr(ep, "dist", None)
    return _name_version(dist)[0] if dist is not None else None


def dist_version(ep) -> str | None:
    dist = getattr(ep, "dist", None)
    return _name_version(dist)[1] if dist is not None else None


def _name_version(dist) -> tuple[str | None, str | None]:
    """A distribution's Name and Version, read from the head of its METADATA: ``dist.name``
    and ``dist.version`` parse the whole file with the email package, whose import alone
    costs a Runtime more than all its plugins' registration."""
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line:
            break  # the headers end at the first empty line; the description follows
        key, _, value = line.partition(":")
        if key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    return found.get("Name"), found.get("Version")


def dist_installed(name: str) -> bool:
    """Whether a distribution of that name is installed (metadata only, nothing imported)."""
    import importlib_metadata

    try:
        importlib_metadata.distribution(name)
    except importlib_metadata.PackageNotFoundError:
        return False
    return True


def backend_dist(backend_id: str) -> str:
    """The distribution a backend id has by the naming rule (``_`` becomes ``-``)."""
    return BACKEND_DIST_PREFIX + backend_id.replace("_", "-")


def install_hint(backend_id: str) -> str:
    """Advice for a backend that is not registered and whose load did not fail: the
    distribution the naming rule gives, installed (then it registered no such backend) or to
    install."""
    dist = backend_dist(backend_id)
    if dist_installed(dist):  # installed: advice to install it would be wrong
        return (f"{dist} is installed but registered no backend {backend_id!r} with this "
                f"Runtime (see nnplug info)")
    return f"install it with: pip install {dist}"


def installed_backend_dists() -> dict[str, str]:
    """Backend id -> the distribution whose ``nnplug.backends`` entry point names it, for
    every installed one (metadata only, nothing imported)."""
    return {ep.name: _name_version(ep.dist)[0] or "?" for ep in entry_points(BACKENDS_GROUP)
            if getattr(ep, "dist", None) is not None}


def absolute_paths(option: str | None) -> str | None:
    """A ':'-separated folder list typed on the command line, relative entries taken from the
    current folder (the library itself refuses relative paths: its working folder is not the
    user's intent)."""
    if option is None:
        return None
    return ":".join(os.path.abspath(p) if p else p for p in option.split(":"))
