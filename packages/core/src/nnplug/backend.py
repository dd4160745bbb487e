"""What a backend is, to the core.

A backend package exposes, through the ``nnplug.backends`` entry point, either a
:class:`Backend` subclass (or an instance, or a zero-argument factory returning one),
or, for a native backend, the path of its shared object (a ``str``/``os.PathLike``,
or a callable returning one). The Runtime then:

- registers the backend's Target kind (:meth:`Backend.target_kind`),
- registers ``device_api.<id>`` and ``target.build.<kind>`` global functions,
- asks :meth:`Backend.supports` for each node and :meth:`Backend.build` for each
  partition it was assigned, and runs the ``"run"`` function of the returned Module.
"""

from __future__ import annotations

from collections.abc import Callable

from .device import device_type_of
from .device_api import DeviceAPI
from .errors import ArgumentTypeError, RegistryError
from .graph import Node, SubGraph
from .target import Target


class Module:
    """What ``target.build.<kind>`` returns: functions looked up by name.

    Every module has ``"run"``: ``run(inputs: list[Tensor]) -> list[Tensor]`` taking the
    subgraph's inputs in order (already on the backend's device) and returning its
    outputs in order, on the backend's device. ``run`` must be safe to call from many
    threads at once. ``close()`` releases what the module holds (kernels, weights).
    """

    def __init__(self, functions: dict[str, Callable], close: Callable[[], None] | None = None):
        if "run" not in functions:
            raise ArgumentTypeError("a Module needs a 'run' function")
        self._functions = dict(functions)
        self._close = close

    def get_function(self, name: str) -> Callable:
        try:
            return self._functions[name]
        except KeyError:
            raise RegistryError(
                f"module has no function {name!r}; it has: {', '.join(sorted(self._functions))}"
            ) from None

    __getitem__ = get_function

    def __contains__(self, name: str) -> bool:
        return name in self._functions

    def close(self) -> None:
        if self._close is not None:
            close, self._close = self._close, None
            close()


class Backend:
    """Base class of Python backends (native ones are wrapped in one by the core).

    Class attributes to set: ``id`` (short lower-case name, e.g. ``"mynpu"``) and
    ``device_type`` (a DLPack device name or number). What the core needs to know to rank it
    among the installed backends, the backend declares (the core names no backend):
    ``priority`` and ``provider_names`` (the same members as a native table's, ABI 1.5).
    """

    id: str = ""
    device_type: int | str = "cpu"
    priority: int = 0
    """Rank in the default backend order (a load or session given no backends): higher
    first, ties in registration order. 100 suits a portable backend that runs nearly every op;
    above it, one that claims only what it runs faster than those; 0, below every backend
    that declares a priority."""
    provider_names: tuple[str, ...] = ()
    """onnxruntime execution provider names this backend can stand for (beyond its device
    type's, e.g. ``"CPUExecutionProvider"`` for every CPU backend)."""
    reduced_precision: tuple[str, ...] = ()
    """The reduced float types (``"float16"``) this backend computes in natively, at least as
    fast as in float32. A node of such a type it claims keeps its type; every other float16
    node is computed in float32 between casts where a backend claims its float32 form (see
    :mod:`nnplug.stages.precision`). Native backends declare none yet."""

    # -- what the core asks -------------------------------------------------------------
    def device_api(self) -> DeviceAPI:
        """The backend's device API (one instance, shared, thread-safe)."""
        raise NotImplementedError

    def target_kind(self) -> dict:
        """Arguments for :func:`nnplug.target.register_target_kind` (minus the name).

        Default: a kind named after the backend with no attributes of its own.
        """
        return {"device_type": self.device_type, "attrs": {}}

    @property
    def target_kind_name(self) -> str:
        return self.id

    def supports(self, node: Node, graph: SubGraph) -> bool:
        """Whether this backend can run ``node``; ``graph`` gives value types/shapes."""
        raise NotImplementedError

    def decline_reason(self, node: Node, graph: SubGraph) -> str | None:
        """Why :meth:`supports` declined ``node``, in a few words, for the placement
        explanation (``Network.placement``); asked only after a decline. Default: None (the
        explanation then says the backend does not support it)."""
        return None

    def supports_fused(self, nodes: list[Node], graph: SubGraph) -> bool:
        """Whether this backend runs ``nodes`` (a node it declined alone and the node after it,
        the only reader of its outputs) together, in one kernel. Also asked before folding for
        a DequantizeLinear of constants and its one reader: yes leaves it unfolded, so the
        backend sees the integer weights (see docs/precision.md). Default: no."""
        return False

    def build(self, subgraph: SubGraph, target: Target) -> Module:
        """Compile ``subgraph`` for ``target``; read the device only through ``target``."""
        raise NotImplementedError

    def set_num_threads(self, num_threads: int) -> None:
        """Worker threads for later runs (0: the backend's default); what
        ``SessionOptions.intra_op_num_threads`` calls. Backends with no thread pool of their
        own keep this default, which raises NotImplementedError (the caller moves on)."""
        raise NotImplementedError(f"{self.describe()} has no thread setting")

    def close(self) -> None:
        """Release process-wide resources when the last Runtime using it closes."""

    # -- derived ------------------------------------------------------------------------
    @property
    def device_type_number(self) -> int:
        return device_type_of(self.device_type)

    def describe(self) -> str:
        return f"backend {self.id!r}"
