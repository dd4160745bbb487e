"""Nodes a backend declines only because their output shapes are unknown at load time (a
native backend without ``kernel_output_shapes`` and a symbolic batch, say). The backend still
answers "no" (it could not plan them), but the load says so instead of quietly moving them:
a :class:`~nnplug.PluginWarning` naming backend, nodes and the missing entry; the reason in
the error when no backend runs such a node; a problem in ``nnplug doctor MODEL``."""

from __future__ import annotations

import warnings

from .errors import PluginWarning
from .graph import Node, SubGraph
from .stages.expand import origin_of

FIX = ("implement kernel_output_shapes in the backend (nnplug/backend.h), or load the model "
       "with static input shapes")


def static_shapes_only(backend, node: Node, graph: SubGraph) -> str | None:
    """Why ``backend`` declines ``node`` only for its shapes, or None (any other reason,
    or a backend that cannot tell)."""
    fn = getattr(backend, "static_shapes_only", None)
    return fn(node, graph) if fn is not None else None


def reason(backend, node: Node, why: str) -> str:
    return f"backend {backend.id!r} runs {node.describe()} only with static shapes: {why}"


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


class ShapeDeclines:
    """Asks ``backends`` whether they run a node (:meth:`claimed`, the expand stage's
    question; :meth:`supports`, the fold and place stages') and remembers the backends that
    declined one only for its shapes.
    ``ask(backend, node, graph)``: how a backend is asked (a
    :class:`~nnplug.supports_cache.SupportsCache`'s, so the place stage reuses the answers)."""

    def __init__(self, backends, ask=None):
        self.backends = backends
        self.ask = ask or (lambda b, node, graph: b.supports(node, graph))
        self.found: dict[str, tuple[Node, object, str]] = {}  # node name -> (node, backend, why)

    def claimed(self, node: Node, graph: SubGraph) -> bool:
        """Whether a backend claims ``node`` (the expand stage's question)."""
        return any(self.supports(b, node, graph) for b in self.backends)

    def supports(self, backend, node: Node, graph: SubGraph) -> bool:
        """``backend``'s answer (asked through ``ask``), remembered when it declines
        ``node`` only for its shapes: how the fold and place stages ask too."""
        if self.ask(backend, node, graph):
            return True
        if node.name not in self.found:
            why = static_shapes_only(backend, node, graph)
            if why:
                self.found[node.name] = (node, backend, why)
        return False

    def note(self, node: Node) -> str:
        """For the error when nothing runs ``node``: the backend that declined it (or the
        node it was expanded from) only for its shapes, and the fix; "" when none did."""
        hit = self.found.get(node.name) or self.found.get(origin_of(node) or "")
        if hit is None:
            return ""
        node_, backend, why = hit
        return f"{reason(backend, node_, why)}. Fix: {FIX}"

    def warn(self, placed: dict) -> None:
        """One warning per backend for the nodes it declined only for their shapes and that
        did not end up on it (``placed``: node name -> Placement)."""
        by_backend: dict[str, list[tuple[Node, str]]] = {}
        for name, (node, b, why) in self.found.items():
            p = placed.get(name)
            if p is not None and p.backend is b:
                continue
            by_backend.setdefault(b.id, []).append((node, why))
        for bid, hits in by_backend.items():
            shown = ", ".join(f"{n.name!r} ({n.op_type})" for n, _ in hits[:8])
            more = f" and {len(hits) - 8} more" if len(hits) > 8 else ""
            warnings.warn(PluginWarning(
                f"backend {bid!r} supports {len(hits)} node(s) of this model but runs them only "
                f"with static shapes, so they go to the next backend in the preference list: "
                f"{shown}{more}. {_sentence(hits[0][1])} (node {hits[0][0].name!r}). Fix: {FIX}"
            ), stacklevel=4)


__all__ = ["FIX", "ShapeDeclines", "reason", "static_shapes_only"]
