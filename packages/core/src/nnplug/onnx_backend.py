"""``nnplug.onnx_backend``: an ``onnx.backend.base.Backend`` over nnplug, so ONNX's own
backend test suite (and any tool built on that interface) runs against nnplug backends.

Which backends it uses: the default order of nnplug's process-wide Runtime (the
``NNPLUG_BACKENDS`` environment variable, comma-separated ids, when set; else the order the
installed backends declare). ``device`` strings are ``"CPU"`` or
an nnplug device such as ``"opencl:0"``.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from onnx.backend.base import Backend as _OnnxBackend
from onnx.backend.base import BackendRep as _OnnxBackendRep

from .runtime import Runtime, default_runtime, set_default_runtime


def runtime() -> Runtime:
    """The Runtime this module uses: the process-wide default (``nnplug.runtime``)."""
    return default_runtime()


def set_runtime(rt: Runtime | None) -> None:
    """Use ``rt`` (e.g. one with test backends registered) instead of the default."""
    set_default_runtime(rt)


def preference(device: str = "CPU") -> list[str]:
    """The runtime's default order (see :meth:`nnplug.Runtime.default_backends`); an
    explicit device puts its backends first."""
    rt = runtime()
    ids = rt.default_backends()
    dev = device.lower().split(":")[0]
    if dev not in ("cpu", ""):
        ids = sorted(ids, key=lambda b: rt.backends[b].device_type != dev
                     if b in rt.backends else True)
    return ids


class NnplugRep(_OnnxBackendRep):
    def __init__(self, network):
        self.network = network

    def run(self, inputs, **kwargs):
        if isinstance(inputs, dict):
            feeds = dict(inputs)
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            names = [i.name for i in self.network.inputs]
            feeds = dict(zip(names, inputs))
        out = self.network.run(feeds)
        return [out[o.name] for o in self.network.outputs]


class NnplugBackend(_OnnxBackend):
    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs) -> NnplugRep:
        super().prepare(model, device, **kwargs)
        return NnplugRep(runtime().load(model, backends=preference(device)))

    @classmethod
    def run_model(cls, model, inputs, device: str = "CPU", **kwargs):
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node, inputs, device: str = "CPU", outputs_info=None, **kwargs):
        """Run one node: wraps it in a model with the inputs' types."""
        from onnx import helper

        names = [n for n in node.input if n]
        arrays = [np.asarray(a) for a in inputs]
        ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
               for n, a in zip(names, arrays)]
        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        imports = [helper.make_opsetid(node.domain or "", opset)]
        # Graph outputs need a type: take them from ONNX shape inference.
        probe = helper.make_model(helper.make_graph([node], "run_node", ins, []),
                                  opset_imports=imports)
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
        outs = [inferred.get(n) or helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                for n in node.output if n]
        model = helper.make_model(helper.make_graph([node], "run_node", ins, outs),
                                  opset_imports=imports)
        return cls.run_model(model, arrays, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        dev = device.lower().split(":")[0]
        if dev == "cpu":
            return True
        return any(b.device_type == dev for b in runtime().backends.values())


prepare = NnplugBackend.prepare
run_model = NnplugBackend.run_model
run_node = NnplugBackend.run_node
supports_device = NnplugBackend.supports_device


@dataclass(frozen=True)
class NodeTest:
    """One of ONNX's backend node tests: a model with input/expected-output data sets."""

    name: str
    model: onnx.ModelProto
    data_sets: list
    """[(inputs, expected_outputs)], lists of numpy arrays."""
    rtol: float
    atol: float

    @property
    def op_types(self) -> set[str]:
        return {n.op_type for n in self.model.graph.node}


@functools.lru_cache(maxsize=1)
def _all_node_tests() -> tuple:
    # Recent onnx wheels ship the node tests as the Python that generates them (the
    # data folder is not installed), so build them from onnx's own case modules.
    import onnx.backend.test.case.node as cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with np.errstate(all="ignore"):
            found = list(cases.collect_testcases(None))
    out = []
    for c in found:
        if c.model is None or not c.data_sets or not _tensors_only(c.model):
            continue  # sequences, maps and optionals are not tensors: out of scope
        sets = [([_array(x) for x in ins], [_array(y) for y in outs])
                for ins, outs in c.data_sets]
        out.append(NodeTest(c.name, c.model, sets, c.rtol, c.atol))
    return tuple(sorted(out, key=lambda t: t.name))


def _tensors_only(model: onnx.ModelProto) -> bool:
    g = model.graph
    return all(v.type.HasField("tensor_type") for v in [*g.input, *g.output])


def _array(x) -> np.ndarray:
    if isinstance(x, onnx.TensorProto):
        from onnx import numpy_helper

        return numpy_helper.to_array(x)
    return np.asarray(x)


def onnx_node_tests(op_types=None) -> list[NodeTest]:
    """ONNX's backend node tests whose nodes all have an op type in ``op_types``
    (all tests when None), from the installed onnx package."""
    tests = _all_node_tests()
    if op_types is None:
        return list(tests)
    wanted = set(op_types)
    return [t for t in tests if t.op_types <= wanted]
