"""The Target attributes a native backend declares (``nnp_backend_v1.target_attrs``, ABI 1.2):
a JSON object ``{"name": {"type": "int", "default": 256}, ...}`` turned into the
``{name: (type, default)}`` mapping :func:`nnplug.register_target_kind` takes."""

from __future__ import annotations

import json
import re

from ..target import COMMON_ATTRS

TYPES = {"int": int, "float": float, "str": str, "bool": bool, "list": list, "dict": dict}
_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}$")
EXAMPLE = '{"max_num_threads": {"type": "int", "default": 256}}'


def _has_type(value, want: type) -> bool:
    if want in (int, float) and isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if want is float else want)


def parse(text: str) -> dict[str, tuple[type, object]]:
    """The attributes declared by ``text``; ValueError saying what is wrong with it."""
    try:
        decl = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"target_attrs is not valid JSON ({e})") from None
    if not isinstance(decl, dict):
        raise ValueError(f"target_attrs must be a JSON object, not {type(decl).__name__}")
    out: dict[str, tuple[type, object]] = {}
    for name, spec in decl.items():
        where = f"target_attrs attribute {name!r}"
        if not _NAME.match(name):
            raise ValueError(f"{where}: a name is [a-z][a-z0-9_]{{0,63}}")
        if name in COMMON_ATTRS:
            raise ValueError(f"{where}: every target kind already has "
                             f"{', '.join(sorted(COMMON_ATTRS))}")
        if not isinstance(spec, dict) or set(spec) != {"type", "default"}:
            raise ValueError(f"{where}: give {{\"type\": ..., \"default\": ...}}, not {spec!r}")
        want = TYPES.get(spec["type"])
        if want is None:
            raise ValueError(f"{where}: type {spec['type']!r} is not one of "
                             f"{', '.join(TYPES)}")
        default = spec["default"]
        if not _has_type(default, want):
            raise ValueError(f"{where}: default {default!r} is not of type {spec['type']}")
        out[name] = (want, float(default) if want is float else default)
    return out
