"""Targets (TVM's Target): a registered kind plus typed attributes, parsed from JSON.

    register_target_kind("opencl", device_type="opencl",
                         attrs={"max_num_threads": (int, 256)},
                         canonicalizer=fill_from_device)
    Target('{"kind": "opencl", "max_num_threads": 128}').attrs
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from .device import Device, device_type_of
from .errors import TargetError
from .registry import TARGET_KINDS

# Every kind accepts these, on top of its own attributes.
COMMON_ATTRS: dict[str, tuple[type, object]] = {
    "device_id": (int, 0),
    "keys": (list, []),
    "tag": (str, ""),
}
_SUPPORTED_TYPES = (int, float, str, bool, list, dict)


@dataclass
class TargetKind:
    name: str
    device_type: int
    attrs: dict[str, tuple[type, object]] = field(default_factory=dict)
    canonicalizer: Callable[[dict, set], dict] | None = None
    """``canonicalizer(attrs, given) -> attrs``: fills device-derived values for the
    attributes not in ``given`` (the names the user set explicitly)."""


TARGET_KINDS.error = TargetError


def register_target_kind(name: str, device_type: int | str,
                         attrs: Mapping[str, tuple[type, object]] | None = None,
                         canonicalizer: Callable | None = None, *,
                         override: bool = False, owner=None) -> TargetKind:
    """Register a target kind (in :data:`nnplug.registry.TARGET_KINDS`); a second one of the
    same name raises unless ``override=True``. ``owner``: whose withdrawal removes it."""
    attrs = dict(attrs or {})
    for a, spec in attrs.items():
        if not (isinstance(spec, tuple) and len(spec) == 2 and spec[0] in _SUPPORTED_TYPES):
            raise TargetError(
                f"target kind {name!r}: attribute {a!r} must be (type, default) with type one of "
                f"int, float, str, bool, list, dict"
            )
    kind = TargetKind(name, device_type_of(device_type), {**COMMON_ATTRS, **attrs}, canonicalizer)
    if name in TARGET_KINDS and not override:
        raise TargetError(f"target kind {name!r} is already registered")
    TARGET_KINDS.add(name, kind, owner=owner, override=True)
    return kind


def remove_target_kind(name: str, kind: TargetKind | None = None) -> None:
    TARGET_KINDS.remove(name, kind)


def get_target_kind(name: str) -> TargetKind:
    kind = TARGET_KINDS.get(name)
    if kind is None:
        known = TARGET_KINDS.names()
        hint = ", ".join(known) if known else "none; install a backend package"
        raise TargetError(f"unknown target kind {name!r}; registered kinds: {hint}")
    return kind


def list_target_kinds() -> list[str]:
    return TARGET_KINDS.names()


def _check_type(kind: str, attr: str, want: type, value):
    ok = isinstance(value, want) and not (want in (int, float) and isinstance(value, bool))
    if want is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not ok:
        raise TargetError(
            f"target {kind!r}: attribute {attr!r} must be {want.__name__}, "
            f"got {type(value).__name__} {value!r}"
        )
    return value


class Target:
    """A compilation target: ``Target("cpu")``, ``Target('{"kind": ...}')`` or a dict."""

    def __init__(self, spec: str | Mapping | Target):
        if isinstance(spec, Target):
            self.kind, self.attrs = spec.kind, dict(spec.attrs)
            return
        if isinstance(spec, str):
            text = spec.strip()
            if text.startswith("{"):
                try:
                    spec = json.loads(text)
                except json.JSONDecodeError as e:
                    raise TargetError(f"target JSON is not valid: {e}") from None
            else:
                spec = {"kind": text}
        if not isinstance(spec, Mapping):
            raise TargetError(f"a target is a kind name, a JSON object or a dict, not {spec!r}")
        spec = dict(spec)
        if "kind" not in spec:
            raise TargetError(f"target {spec!r} has no 'kind'")
        self.kind = get_target_kind(spec.pop("kind"))
        given = set(spec)
        attrs = {}
        for name, (typ, default) in self.kind.attrs.items():
            attrs[name] = _check_type(self.kind.name, name, typ, spec.pop(name)) if name in given \
                else (list(default) if isinstance(default, list) else default)
        if spec:
            raise TargetError(
                f"target {self.kind.name!r} has no attribute(s) {', '.join(sorted(spec))}; "
                f"its attributes: {', '.join(sorted(self.kind.attrs))}"
            )
        if self.kind.canonicalizer is not None:
            attrs = self.kind.canonicalizer(attrs, given)
            for name in attrs:
                if name not in self.kind.attrs:
                    raise TargetError(
                        f"target kind {self.kind.name!r}: canonicalizer set unknown attribute {name!r}"
                    )
        self.attrs = attrs

    @property
    def device(self) -> Device:
        return Device(self.kind.device_type, self.attrs["device_id"])

    def export(self) -> dict:
        return {"kind": self.kind.name, **self.attrs}

    def __str__(self) -> str:
        return json.dumps(self.export(), sort_keys=True)

    def __repr__(self) -> str:
        return f"nnplug.Target({str(self)!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Target) and self.export() == other.export()

    def __hash__(self) -> int:
        return hash(str(self))
