"""Network: a loaded model compiled into a plan (by :mod:`nnplug.pipeline`), and its runs."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

import numpy as np

from .errors import InputError, NnplugError
from .host_path import HostPath
from .plugins import BACKENDS, log
from .stages.executor import Plan, Step, check_feeds, input_table, run_steps
from .tensor import Tensor
from .values import MapSequence, TensorSequence

if TYPE_CHECKING:
    from .graph import Model, Node


class Network:
    """A loaded model, compiled for its backends. ``run`` is thread-safe."""

    def __init__(self, model: Model, plan: Plan, lease_keys: list, *, nodes=None,
                 optimization: str = "all"):
        """``plan``: what the pipeline's compile stage made (its steps are closed with this
        network); ``lease_keys``: the backends' leases, retained by the caller for this network
        (it releases them when it closes); ``nodes``: the nodes the plan runs."""
        self.name = model.name
        self.optimization = optimization
        self.inputs = list(model.inputs)
        self.outputs = list(model.outputs)
        self.assignment: dict[str, str] = plan.assignment
        self._declined = plan.declined
        self.op_types = {n.name: n.op_type for n in model.nodes}
        """node name -> op type (profiles name partitions by them)."""
        self._constants = plan.constants
        self.nodes: list[Node] = list(model.nodes if nodes is None else nodes)
        """The nodes the network runs: after expansion, folding and merging
        (``nnplug.optimized_model`` writes them as an ONNX model)."""
        self._steps: list[Step] = plan.steps
        self._lease_keys = list(lease_keys)
        self._closed = False
        self._finalizer = weakref.finalize(self, release_plan, self._steps, self._lease_keys)
        self._output_names = [o.name for o in self.outputs]
        self._input_table = input_table(self.inputs)
        self._host_path = HostPath.of(self.inputs, self._steps, self._output_names,
                                      self._constants)
        """The common case's short way (None when the plan has none): see nnplug.host_path."""

    @property
    def placement(self) -> dict[str, dict]:
        """Per node: ``{"op": op type, "ran_on": where it runs (as in ``assignment``),
        "declined": {backend or custom op tried before it: the reason it gave}}``."""
        return {n: {"op": self.op_types.get(n, n.rsplit("/", 1)[-1]), "ran_on": where,
                    "declined": dict(self._declined.get(n, {}))}
                for n, where in self.assignment.items()}

    def explain_placement(self) -> str:
        """The placement as text: one line per node, with every decline and its reason."""
        lines = []
        for node, p in self.placement.items():
            lines.append(f"{node}: {p['ran_on']}")
            lines.extend(f"    declined by {who}: {why}" for who, why in p["declined"].items())
        return "\n".join(lines)

    def run(self, feeds: dict, output_names: list[str] | None = None) -> dict:
        """Run the network: ``{input name: array}`` -> ``{output name: numpy array}``."""
        if self._host_path is not None:  # None once closed: the general path says so
            out = self._host_path.run(feeds, output_names)
            if out is not None:
                return dict(zip(self._output_names if output_names is None else output_names,
                                out))
        return {n: t.numpy() for n, t in self.run_tensors(feeds, output_names).items()}

    def run_list(self, feeds: dict, output_names: list[str] | None = None) -> list:
        """Like :meth:`run`, the arrays in a list in the order of ``output_names`` (None: the
        model's outputs, in order)."""
        if self._host_path is not None:  # None once closed: the general path says so
            out = self._host_path.run(feeds, output_names)
            if out is not None:
                return out
        names = self._output_names if output_names is None else list(output_names)
        tensors = self.run_tensors(feeds, names)
        return [tensors[n].numpy() for n in names]

    def run_tensors(self, feeds: dict, output_names: list[str] | None = None) -> dict:
        """Like :meth:`run`, but outputs stay where their backend made them: ``{name:
        Tensor}`` (on a device for device backends; export with DLPack or ``.numpy()``).
        Feeds may be Tensors already on a backend's device: they are used without a copy."""
        if self._closed:
            raise NnplugError("this Network is closed")
        fast = self._host_path
        if fast is not None:
            out = fast.run(feeds, output_names)
            if out is not None:
                return {n: Tensor.from_numpy(a) if type(a) is np.ndarray else MapSequence(a)
                        for n, a in zip(output_names or self._output_names, out)}
        names = self._output_names if output_names is None else list(output_names)
        bad = [n for n in names if n not in self._output_names]
        if bad:
            raise InputError(
                f"unknown output name(s) {', '.join(map(repr, bad))}; the model's outputs: "
                f"{', '.join(self._output_names)}"
            )
        env = check_feeds(feeds, self._input_table)
        fed = [t.handle for v in env.values() for t in _tensors(v) if t.is_host]
        for name in self._output_names:  # plan.constants grows while the network is compiled
            if name in self._constants and name not in env:  # a copy: callers may write to it
                env[name] = Tensor.from_numpy(self._constants[name].copy())
        env = run_steps(self._steps, env)
        return {n: _unaliased(env[n], fed) for n in names}

    def run_async(self, feeds: dict, output_names: list[str] | None = None):
        """Start :meth:`run` on a worker thread; a ``concurrent.futures.Future`` of its
        result (the run's profiler and run options, if any, go with it)."""
        from .batching import submit

        return submit(self, feeds, output_names)

    def run_many(self, feeds_iterable, output_names: list[str] | None = None, *,
                 batch_size: int = 1) -> list[dict]:
        """Run every feed dict of ``feeds_iterable``; one result dict per feed, in order.
        ``batch_size > 1`` stacks that many feeds along the batch axis (the first dimension,
        which must be symbolic in every input and output) into one run."""
        from .batching import run_many

        return run_many(self, feeds_iterable, output_names, batch_size)

    @property
    def constants(self) -> dict:
        """Initializers and folded values by name (what :attr:`nodes` read besides the feeds)."""
        return self._constants

    def close(self) -> None:
        """Release kernels and backend leases (also done when the network is collected)."""
        self._closed = True
        self._host_path = None
        self._finalizer()

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<nnplug.Network {self.name!r} inputs={[i.name for i in self.inputs]} "
                f"outputs={[o.name for o in self.outputs]}>")


def _tensors(value) -> tuple:
    """The tensors a value holds: itself, or a sequence's items."""
    if isinstance(value, Tensor):
        return (value,)
    return value.items if isinstance(value, TensorSequence) else ()


def _unaliased(value, fed: list):
    """``value``, copied where it shares memory with a feed (a graph input that is also an
    output, an Identity of a sequence): outputs are the caller's to keep and write, as in
    onnxruntime."""
    def shared(t):
        return t.is_host and any(np.may_share_memory(t.handle, f) for f in fed)

    if not fed or not any(shared(t) for t in _tensors(value)):
        return value
    if isinstance(value, Tensor):
        return Tensor.from_numpy(value.handle.copy())
    return TensorSequence([Tensor.from_numpy(t.handle.copy()) if shared(t) else t
                           for t in value.items], value.dtype)


def release_plan(steps: list[Step], lease_keys: list) -> None:
    """Close a plan's kernels, then release the backend leases that kept them valid."""
    for s in steps:
        if s.close is not None:
            try:
                s.close()
            except Exception as e:
                log.warning("nnplug: releasing %s failed: %s", s.label, e)
    steps.clear()
    for key in lease_keys:
        BACKENDS.release(key)
    lease_keys.clear()


__all__ = ["Network"]
