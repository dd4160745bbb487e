"""Custom ops of the op package under test: registration, shape inference against compute,
results against a reference, callback order, failure handling.

Inputs: the op's ``conformance_cases`` (a list, or a method returning one, of
``{"inputs": [arrays], "attrs": {...}}``) where the Python op class defines it, else unary
float32 inputs of a few shapes. References: for ops overriding a standard ONNX op,
``onnx.reference``; else a Python op class of the same ``op_type`` in the entry point's module
(the package's numpy version of a native op).
"""

from __future__ import annotations

import inspect
import logging
import re

import numpy as np
import pytest
from onnx import helper

from nnplug import NnplugError, PluginError
from nnplug.customop import PythonCustomOp, is_standard_op

from .summary import NOT_COMPARED

DOMAIN = "com.nnplug.conformance"


def pytest_generate_tests(metafunc):
    if "op_type" in metafunc.fixturenames:
        from .conftest import subject

        s = subject(metafunc.config)
        metafunc.parametrize("op_type", s.op_types or [None], ids=s.op_types or ["no-op"])


@pytest.fixture
def op(nnplug_subject, op_type):
    if op_type is None:
        pytest.skip("no op under test (pass --nnplug-op NAME)")
    return nnplug_subject.runtime.ops[op_type]


def _python_class(subject, op_type):
    """A Python implementation of ``op_type`` (the registered one, or a class in the module)."""
    registered = subject.runtime.ops[op_type]
    if isinstance(registered, PythonCustomOp):
        return registered.impl
    for _, obj in inspect.getmembers(subject.op_module or object(), inspect.isclass):
        if getattr(obj, "op_type", None) == op_type and callable(getattr(obj, "compute", None)):
            return obj()
    return None


def _cases(impl):
    given = getattr(impl, "conformance_cases", None) if impl is not None else None
    if given is not None:
        given = given() if callable(given) else given
        return [(dict(c.get("attrs", {})), [np.asarray(x) for x in c["inputs"]]) for c in given]
    rng = np.random.default_rng(0)
    return [({}, [rng.standard_normal(shape).astype(np.float32)])
            for shape in [(7,), (3, 5), (2, 3, 4, 5)]]


def _model(op, attrs, inputs, n_outputs=1):
    names = [f"x{i}" for i in range(len(inputs))]
    outs = [f"y{i}" for i in range(n_outputs)]
    domain = "" if op.override else DOMAIN
    node = helper.make_node(op.op_type, names, outs, domain=domain, name="node0", **attrs)
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(x.dtype), list(x.shape))
           for n, x in zip(names, inputs)]
    shapes, dtypes = op.shape_infer(_node_for(op, node, attrs), [list(x.shape) for x in inputs],
                                    [x.dtype for x in inputs])
    # graph outputs: the dtype, and a symbolic dim per axis (the op's shape inference fills them)
    ovis = [helper.make_tensor_value_info(o, helper.np_dtype_to_tensor_dtype(np.dtype(dt)),
                                          [f"{o}_d{k}" for k in range(len(shape))])
            for o, shape, dt in zip(outs, shapes, dtypes)]
    graph = helper.make_graph([node], f"conformance_{op.op_type}", vis, ovis)
    opsets = [helper.make_opsetid("", 17)] + ([] if op.override else [helper.make_opsetid(DOMAIN, 1)])
    return helper.make_model(graph, opset_imports=opsets)


def _node_for(op, proto, attrs):
    from nnplug import Node

    return Node(proto.name, proto.op_type, proto.domain, list(proto.input), list(proto.output),
                dict(attrs), 1, proto)


def _reference(subject, op, attrs, inputs, model):
    """The reference outputs, or None when there is no independent reference."""
    if op.override:
        from onnx.reference import ReferenceEvaluator

        return ReferenceEvaluator(model).run(None, {f"x{i}": x for i, x in enumerate(inputs)})
    impl = _python_class(subject, op.op_type)
    if impl is None or isinstance(op, PythonCustomOp):
        return None  # no independent reference: the Python op is its own
    node = _node_for(op, model.graph.node[0], attrs)
    return [np.asarray(o) for o in impl.compute(node, inputs)]


def test_registration(nnplug_subject, op):
    assert op.op_type and op.source
    assert set(op.targets) <= {"cpu", "gpu"} and op.targets, f"targets {op.targets}"
    assert op.override == is_standard_op(op.op_type), (
        f"{op.op_type!r}: override={op.override} but it is "
        f"{'a' if is_standard_op(op.op_type) else 'not a'} standard ONNX op")
    assert op.op_type in op.describe()
    with pytest.raises(PluginError, match=op.op_type):
        nnplug_subject.runtime.register_custom_op(op)  # each op type is registered once


def test_shape_inference_matches_compute(nnplug_subject, op):
    subject = nnplug_subject
    impl = _python_class(subject, op.op_type)
    for k, (attrs, inputs) in enumerate(_cases(impl)):
        model = _model(op, attrs, inputs)
        with subject.runtime.load(model, backends=subject.backends_for_ops) as net:
            assert any(v.startswith("op:") for v in net.assignment.values()), \
                f"case {k}: the op declined the node: {net.assignment}"
            got = net.run({f"x{i}": x for i, x in enumerate(inputs)})
            for info in net.outputs:
                value = got[info.name]
                assert tuple(info.shape) == value.shape, (
                    f"case {k}: shape_infer said {info.shape}, compute gave {value.shape}")
                assert info.dtype == value.dtype, (
                    f"case {k}: shape_infer said {info.dtype}, compute gave {value.dtype}")
            again = net.run({f"x{i}": x for i, x in enumerate(inputs)})
            for name in got:
                assert np.array_equal(got[name], again[name], equal_nan=True), \
                    f"case {k}: two runs on the same input differ"


def _no_reference_reason(subject, op) -> str | None:
    """Why the values of ``op`` cannot be compared with anything, or None when they can."""
    if op.override:
        return None  # onnx.reference runs the standard op
    if isinstance(op, PythonCustomOp):
        return ("a Python op is its own reference; check its values in the package's own "
                "tests")
    if _python_class(subject, op.op_type) is None:
        where = ("an op library given by path (--nnplug-op-library) comes with no Python "
                 "reference; test it through its package's entry point (--nnplug-op NAME) "
                 if subject.op_module is None else
                 f"no Python op class with op_type {op.op_type!r} in {subject.op_module.__name__}; ")
        return where + "with a numpy op class of the same op_type beside it"
    return None


def test_values_match_a_reference(nnplug_subject, op):
    """Results against an independent reference: onnx.reference for standard ops, else the
    package's Python op class of the same op_type. Without one this check is SKIPPED with
    the reason, and the summary says loudly that the values were not compared."""
    subject = nnplug_subject
    why = _no_reference_reason(subject, op)
    if why is not None:
        pytest.skip(f"{NOT_COMPARED} for {op.op_type}: {why}")
    impl = _python_class(subject, op.op_type)
    for k, (attrs, inputs) in enumerate(_cases(impl)):
        model = _model(op, attrs, inputs)
        with subject.runtime.load(model, backends=subject.backends_for_ops) as net:
            got = net.run({f"x{i}": x for i, x in enumerate(inputs)})
            want = _reference(subject, op, attrs, inputs, model)
            assert want is not None, f"no reference for {op.op_type}"
            for info, w in zip(net.outputs, want):
                w = np.asarray(w)
                if w.dtype.kind == "f":
                    np.testing.assert_allclose(got[info.name], w, rtol=1e-4, atol=1e-6,
                                               err_msg=f"case {k} against the reference")
                else:
                    np.testing.assert_array_equal(got[info.name], w,
                                                  err_msg=f"case {k} against the reference")


_CALL = re.compile(r"^(\S+)\[([^\]]*)\] (\w+)\(")


def test_callback_order(nnplug_subject, op, caplog):
    """Native ops: init once, prepare before every compute, destroy once at release (read from
    the host's debug log of callbacks). Python ops: shape_infer at load, compute once per run."""
    subject = nnplug_subject
    impl = _python_class(subject, op.op_type)
    attrs, inputs = _cases(impl)[0]
    feeds = {f"x{i}": x for i, x in enumerate(inputs)}
    model = _model(op, attrs, inputs)
    if isinstance(op, PythonCustomOp):
        calls = []

        class Recorder:
            op_type = op.op_type

            def shape_infer(self, node, shapes, dtypes):
                calls.append("shape_infer")
                return op.impl.shape_infer(node, shapes, dtypes)

            def compute(self, node, ins):
                calls.append("compute")
                return op.impl.compute(node, ins)

        from nnplug import CreationOptions, Runtime

        with Runtime(CreationOptions.isolated()) as rt:
            rt.register_custom_op(Recorder(), override=op.override)
            with rt.load(model) as net:
                loaded = list(calls)
                net.run(feeds)
                net.run(feeds)
        assert loaded and set(loaded) == {"shape_infer"}, f"at load: {loaded}"
        assert calls[len(loaded):] == ["compute", "compute"], f"calls: {calls}"
        return
    with caplog.at_level(logging.DEBUG, logger="nnplug"):
        net = subject.runtime.load(model, backends=subject.backends_for_ops)
        net.run(feeds)
        net.run(feeds)
        net.close()
    calls = [m.group(3) for r in caplog.records
             if (m := _CALL.match(r.getMessage())) and m.group(1) == op.op_type
             and m.group(3) in ("init", "prepare", "compute", "destroy")]
    if not calls:
        pytest.skip("this op kind logs no callbacks")
    assert calls[0] == "init" and calls.count("init") == 1, f"callbacks: {calls}"
    assert calls[-1] == "destroy" and calls.count("destroy") == 1, f"callbacks: {calls}"
    body = calls[1:-1]
    per_run = ["prepare", "compute"] if "prepare" in body else ["compute"]  # prepare is optional
    assert body == per_run * 2, f"callbacks: {calls}"


def test_failure_is_a_clear_error_and_the_runtime_stays_usable(nnplug_subject, op):
    """Inputs the op cannot take give an nnplug error naming the op (or a consistent result);
    afterwards the same Runtime loads and runs the op as before."""
    subject = nnplug_subject
    impl = _python_class(subject, op.op_type)
    attrs, inputs = _cases(impl)[0]
    for bad in ([x.astype(np.int8) for x in inputs], [x.reshape(-1)[:0] for x in inputs]):
        try:
            model = _model(op, attrs, bad)
            with subject.runtime.load(model, backends=subject.backends_for_ops) as net:
                out = net.run({f"x{i}": x for i, x in enumerate(bad)})
                for info in net.outputs:
                    assert tuple(info.shape) == out[info.name].shape
        except (NnplugError, ValueError, TypeError) as e:
            assert op.op_type in str(e) or isinstance(e, (ValueError, TypeError)), \
                f"the error does not name the op: {e}"
    model = _model(op, attrs, inputs)
    with subject.runtime.load(model, backends=subject.backends_for_ops) as net:
        net.run({f"x{i}": x for i, x in enumerate(inputs)})
