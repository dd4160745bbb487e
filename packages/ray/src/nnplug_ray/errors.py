"""nnplug's error out of Ray's wrapping of it, on the driver."""

from __future__ import annotations

import re

import nnplug

# How a traceback's last line names an nnplug error: "nnplug.errors.ModelError: ..."
_NAMED = re.compile(r"^nnplug(?:\.errors)?\.(\w+): (.+)$", re.MULTILINE)


def nnplug_error(exc: BaseException) -> nnplug.NnplugError | None:
    """The nnplug error behind ``exc`` (an exception from consuming a Dataset), or None.

    An error raised in a batch reaches the driver chained to Ray's; an error raised while an
    actor loads the model reaches it only as the text of Ray's ``ActorDiedError``, so that
    error is rebuilt from its type name and message.
    """
    seen = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, nnplug.NnplugError):
            return e
        todo += [c for c in (e.__cause__, e.__context__, getattr(e, "cause", None))
                 if isinstance(c, BaseException)]
    found = _NAMED.findall(str(exc))
    for name, message in reversed(found):
        cls = getattr(nnplug, name, None)
        if isinstance(cls, type) and issubclass(cls, nnplug.NnplugError):
            return cls(message.strip())
    return None
