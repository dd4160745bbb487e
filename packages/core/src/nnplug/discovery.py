"""Entry-point discovery: ``nnplug.backends``, ``nnplug.ops`` and ``nnplug.cli``.

Reading entry points only reads package metadata; a plugin's module is imported when
its entry point is loaded, never earlier. ``NNPLUG_DISABLE_PLUGINS`` (comma-separated
entry point names, or ``*``) skips plugins without importing them.
"""

from __future__ import annotations

import os

import importlib_metadata

BACKENDS_GROUP = "nnplug.backends"
OPS_GROUP = "nnplug.ops"
CLI_GROUP = "nnplug.cli"
DISABLE_ENV = "NNPLUG_DISABLE_PLUGINS"


def disabled_names(extra=None) -> set[str]:
    names = {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}
    return names | set(extra or ())


def entry_points(group: str) -> list:
    """The group's entry points, sorted by name, one per name (first distribution wins)."""
    seen, out = set(), []
    for ep in sorted(importlib_metadata.entry_points(group=group), key=lambda e: e.name):
        if ep.name not in seen:
            seen.add(ep.name)
            out.append(ep)
    return out


def describe(ep) -> str:
    dist = getattr(ep, "dist", None)
    where = f" from {dist.name} {dist.version}" if dist is not None else ""
    return f"{ep.group}:{ep.name} = {ep.value}{where}"


def dist_version(ep) -> str | None:
    dist = getattr(ep, "dist", None)
    return dist.version if dist is not None else None


def dist_installed(name: str) -> bool:
    """Whether a distribution of that name is installed (metadata only, nothing imported)."""
    try:
        importlib_metadata.distribution(name)
    except importlib_metadata.PackageNotFoundError:
        return False
    return True
