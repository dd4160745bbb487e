"""What each backend answered ``supports(node, graph)`` while one model is compiled: the
expand stage asks (does a backend claim the node whole, or is it expanded?), and the fold
and place stages reuse the answer instead of asking again.

An answer is reused only while what the backend is shown of the node stays the same: its
op, attributes, inputs and outputs, their types and shapes, and which of them are constants
(folding makes values constant and shapes static, merging rewires inputs; then the backend
is asked again, as its answer may change)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import Backend
    from .graph import Node, SubGraph


class SupportsCache:
    """``ask(backend, node, graph)``: ``backend.supports(node, graph)``, asked once per node
    and backend while the node's view stays the same."""

    def __init__(self):
        self._answers: dict[tuple[str, str], tuple[tuple, list, bool]] = {}

    def ask(self, backend: Backend, node: Node, graph: SubGraph) -> bool:
        key = (node.name, backend.id)
        seen, objects = _view(node, graph)
        kept = self._answers.get(key)
        if kept is not None and kept[0] == seen and len(kept[1]) == len(objects) and all(
                a is b for a, b in zip(kept[1], objects)):
            return kept[2]
        answer = bool(backend.supports(node, graph))
        self._answers[key] = (seen, objects, answer)
        return answer


def _view(node: Node, graph: SubGraph) -> tuple[tuple, list]:
    """What ``supports`` sees of ``node``: a comparable tuple, and the objects compared by
    identity (its attributes, its proto, the constant arrays among its inputs and outputs:
    a folded value is a new array)."""
    values = getattr(graph, "values", None) or {}
    consts = getattr(graph, "constants", None) or {}
    names = [*node.inputs, *node.outputs]
    seen = (node.op_type, node.domain, node.opset, tuple(node.inputs), tuple(node.outputs),
            tuple(values.get(x) for x in names), tuple(x in consts for x in names))
    return seen, [node.attrs, node.proto, *(consts[x] for x in names if x in consts)]


__all__ = ["SupportsCache"]
