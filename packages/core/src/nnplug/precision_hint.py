"""The precision hint (OpenVINO's INFERENCE_PRECISION_HINT): a float32 model may run in a
reduced precision where a backend can, never by default.

The hint reaches backends through their Target: a backend that can honour it declares a
``precision`` attribute on its Target kind (a native backend in ``target_attrs``), and reads it
when it builds. Three ways to give it, the first that is set wins:

- the Target itself: ``rt.load(m, targets={"onednn": {"kind": "onednn", "precision": "bf16"}})``,
  or a provider option ``{"precision": "bf16"}``;
- the session config entry ``nnplug.precision`` (``SessionOptions.add_session_config_entry``);
- the environment variable ``NNPLUG_PRECISION``.

Values: ``f32`` (exact: the model's own types; the default) and ``bf16`` (products in
bfloat16, accumulated and returned in float32). A backend whose kind declares no ``precision``
runs the model as written, and says so in an info line of the ``nnplug`` logger.
"""

from __future__ import annotations

import json
import logging
import os

from .errors import InvalidArgumentError

log = logging.getLogger("nnplug")

ATTR = "precision"
"""The Target attribute a backend declares to take the hint."""
CONFIG_KEY = "nnplug.precision"
"""The session config entry that gives the hint to every backend of a session."""
ENV = "NNPLUG_PRECISION"
"""The environment variable that gives the hint to every load."""
HINTS = ("f32", "bf16")


def check_hint(value: str, where: str) -> str:
    """``value`` when it is a hint nnplug knows; else an error naming ``where`` it came from."""
    if value not in HINTS:
        raise InvalidArgumentError(f"{where}={value!r}: the precision hint is one of "
                                   f"{', '.join(HINTS)} (f32: exact, the default)")
    return value


def hinted_targets(infos: list, targets: dict, hint: str | None = None,
                   where: str = CONFIG_KEY) -> dict:
    """``targets`` (backend id -> Target spec) with ``precision`` set to ``hint`` (else to
    ``NNPLUG_PRECISION``) for each backend of ``infos`` whose Target kind declares it and
    whose spec does not set it already; ``targets`` itself when no hint is given."""
    if hint is None:
        hint, where = os.environ.get(ENV) or None, ENV
    if hint is None:
        return targets
    check_hint(hint, where)
    from .target import Target, get_target_kind

    out = dict(targets)
    for info in infos:
        spec = out.get(info.id, info.backend.target_kind_name)
        if isinstance(spec, Target):
            continue  # built already: what it says is what the caller chose
        if isinstance(spec, str):
            spec = json.loads(spec) if spec.strip().startswith("{") else {"kind": spec}
        spec = dict(spec)
        if ATTR not in get_target_kind(spec.get("kind", info.backend.target_kind_name)).attrs:
            if hint != "f32":
                log.info("backend %r ignores %s=%s: its Target kind has no %r attribute, it "
                         "runs the model in the types it is written in", info.id, where, hint,
                         ATTR)
            continue
        spec.setdefault(ATTR, hint)
        out[info.id] = spec
    return out


__all__ = ["ATTR", "CONFIG_KEY", "ENV", "HINTS", "check_hint", "hinted_targets"]
