"""The plan a compiled network runs (what the compile stage makes, :mod:`nnplug.stages.compiler`):
a list of steps in topological order, each one backend partition (a built Module), one
custom-op node or one node the core runs. The run stage (:mod:`nnplug.stages.executor`) runs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from .device import Device
    from .device_api import DeviceAPI
    from .graph import ValueInfo
    from .tensor import Tensor


@dataclass
class Step:
    label: str
    """Backend id or custom-op label, for errors and ``net.assignment``."""
    nodes: list[str]
    inputs: list[str]
    outputs: list[str]
    device: Device
    api: DeviceAPI
    run: Callable[[list[Tensor]], list[Tensor]]
    close: Callable[[], None] | None = None
    frees: list[str] = field(default_factory=list)
    """Values whose last use is this step: dropped after it runs."""
    values: dict[str, ValueInfo] = field(default_factory=dict)
    """Declared or inferred types and shapes of its inputs and outputs: what it returns is
    checked against them."""
    run_arrays: Callable[[list[np.ndarray]], list[np.ndarray]] | None = None
    """The module's ``run_arrays`` when it has one: ``run`` on host numpy arrays of the
    inputs' dtypes and shapes (their symbolic dims bound alike), C-contiguous, with no run
    context (see :mod:`nnplug.host_path`). Where some output shape is not static, the arrays
    it returns have been checked against the model's shapes."""
    fresh_arrays: bool = False
    """Whether ``run_arrays`` returns, in every run, new arrays that the core itself allocated
    with the model's shape and dtype of each output (never an input or a constant): the
    host path then checks neither their shapes nor whether they alias a feed."""
    static_outputs: list[tuple[tuple[int, ...], np.dtype]] | None = field(init=False)
    """(shape, dtype) of every output when all are static and typed: the per-run check is
    then one comparison each (found once, here)."""

    def __post_init__(self):
        vs = [self.values.get(o) for o in self.outputs]
        self.static_outputs = ([(tuple(v.shape), v.dtype) for v in vs]
                               if vs and all(v is not None and v.is_static and v.dtype is not None
                                             and v.kind == "tensor" for v in vs) else None)


@dataclass
class Plan:
    """What the compile stage (:mod:`nnplug.stages.compiler`) makes of a model for a Network."""

    constants: dict[str, np.ndarray]
    """The model's weights and the values folded at load time, by name."""
    steps: list[Step] = field(default_factory=list)
    assignment: dict[str, str] = field(default_factory=dict)
    """node name -> where it runs (``Network.assignment``)."""
    declined: dict[str, dict[str, str]] = field(default_factory=dict)
    """node name -> {backend or custom op that declined it before the one chosen: why}."""


def plan_frees(steps: list[Step], keep: set[str]) -> None:
    """Fill each step's ``frees`` from the last step that reads each value."""
    last_use: dict[str, int] = {}
    for i, s in enumerate(steps):
        for x in s.inputs:
            last_use[x] = i
    for name, i in last_use.items():
        if name not in keep:
            steps[i].frees.append(name)


__all__ = ["Plan", "Step", "plan_frees"]
