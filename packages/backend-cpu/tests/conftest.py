"""Fixtures: a Runtime with only this package's backend, and model helpers."""

from __future__ import annotations

import os
import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnplug
import nnplug_backend_cpu
from nnplug_conformance.fixtures import for_onnxruntime  # noqa: F401 - the tests import it from here

ZOO = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
ZOO_MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
              "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def isolated_runtime() -> nnplug.Runtime:
    return nnplug.Runtime(nnplug.CreationOptions.isolated())


@pytest.fixture(scope="session")
def rt():
    r = isolated_runtime()
    r.register_backend(nnplug_backend_cpu.library_path())
    yield r
    r.close()


def one_node_model(op, inputs, attrs=None, *, outputs=1, initializers=None, opset=18,
                   const_inputs=()):
    """A model of one node. inputs: list of numpy arrays (None for an omitted optional
    input); indices in const_inputs become initializers (weights) instead of graph inputs."""
    names, graph_inputs, inits = [], [], []
    for i, a in enumerate(inputs):
        if a is None:
            names.append("")
            continue
        name = f"in{i}"
        names.append(name)
        if i in const_inputs:
            inits.append(numpy_helper.from_array(np.asarray(a), name))
        else:
            graph_inputs.append(helper.make_tensor_value_info(
                name, helper.np_dtype_to_tensor_dtype(np.asarray(a).dtype), np.asarray(a).shape))
    out_names = [f"out{j}" for j in range(outputs)]
    node = helper.make_node(op, names, out_names, name=f"{op.lower()}_node", **(attrs or {}))
    probe = helper.make_model(helper.make_graph([node], "g", graph_inputs, [], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe).graph.value_info}
    outs = [inferred.get(n) or helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
            for n in out_names]
    model = helper.make_model(helper.make_graph([node], "g", graph_inputs, outs, inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    feeds = {f"in{i}": np.asarray(a) for i, a in enumerate(inputs)
             if a is not None and i not in const_inputs}
    return model, feeds


def onnxruntime_run(model, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(for_onnxruntime(model).SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(rt, request):
    """The backend at 1 and at 2 threads (its default again afterwards)."""
    lib = rt.backends["cpu"].backend
    lib.set_num_threads(request.param)
    yield request.param
    lib.set_num_threads(0)


def reference(model, feeds):
    from onnx.reference import ReferenceEvaluator

    return ReferenceEvaluator(model).run(None, feeds)


def kernel_level(model) -> str:
    """The optimization level that lets a one-node model's kernel run: Shape and Size of a
    static input are computed at load unless folding is off."""
    return "disable" if {n.op_type for n in model.graph.node} & {"Shape", "Size"} else "all"


def run_cpu(rt, model, feeds, optimization="all"):
    with rt.load(model, backends=["cpu"], optimization=optimization) as net:
        out = net.run(feeds)
        return [out[o.name] for o in net.outputs], dict(net.assignment)


def assert_close(got, want, rtol=1e-5, atol=1e-5, what=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=what)


def zoo_model(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(ZOO, f"light_{name}.onnx"))


def zoo_expected(name: str) -> np.ndarray:
    return numpy_helper.to_array(onnx.load_tensor(os.path.join(ZOO, f"light_{name}_output_0.pb")))


def zoo_input(model: onnx.ModelProto, seed=0):
    inits = {i.name for i in model.graph.initializer}
    (inp,) = [i for i in model.graph.input if i.name not in inits]
    shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
    return inp.name, np.random.default_rng(seed).random(shape, dtype=np.float32)


def pytest_terminal_summary(terminalreporter):
    import sys

    mod = sys.modules.get("test_onnx_node_tests")
    if mod is not None and sum(mod.COUNTS.values()):
        c = mod.COUNTS
        terminalreporter.write_line(
            f"ONNX node tests on the cpu backend: {c['passed']} passed, {c['failed']} failed, "
            f"{c['not claimed']} not claimed (of {len(mod.CASES)})")


def run_from_threads(work, n: int = 4) -> None:
    """work(0) .. work(n-1), each on its own thread at once; the first exception any raised is
    raised here."""
    errors = []

    def guarded(i):
        try:
            work(i)
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)

    workers = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    if errors:
        raise errors[0]


def first_inferred_shape(nodes, inputs, inits, opset: int = 18) -> list[int]:
    """The static shape ONNX infers for the first value the nodes compute (e.g. a Conv's output)."""
    probe = helper.make_model(helper.make_graph(nodes, "g", inputs, [], inits),
                              opset_imports=[helper.make_opsetid("", opset)])
    return [d.dim_value for d in onnx.shape_inference.infer_shapes(probe).graph.value_info[0]
            .type.tensor_type.shape.dim]


def profiled_ops(child: str, *args: str) -> list[str]:
    """The op of each node the cpu backend ran, in order (NNPLUG_CPU_PROFILE=1 prints one line
    per node), in a process of its own running the code ``child`` with this folder as
    ``sys.argv[1]`` and ``args`` after it."""
    import subprocess
    import sys

    env = dict(os.environ, NNPLUG_CPU_PROFILE="1")
    out = subprocess.run([sys.executable, "-c", child, os.path.dirname(__file__), *args],
                         env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [line.split()[1] for line in out.stderr.splitlines() if line.startswith("nnplug-cpu:")]
