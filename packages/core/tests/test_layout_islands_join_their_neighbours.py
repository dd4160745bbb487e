"""A partition of data movement alone (Transpose, Reshape, Squeeze, Unsqueeze, Flatten,
Identity) whose neighbours by data all run on one other backend that runs it too is placed
there (planner.Placer.join_layout_islands): alone it costs two crossings between backends,
and on a device two copies, for no arithmetic. The placement explanation says so. Left where
it is: between two other backends, when the neighbours' backend does not run it, and when
the partition also computes."""

import numpy as np
from numpy_backend import NumpyBackend, make_runtime
from onnx import TensorProto, helper, numpy_helper

SHAPE = numpy_helper.from_array(np.array([4, 3], np.int64), "shape")


def chain(*ops: str):
    """x [3, 4] -> ops in a row -> y; Reshape reads SHAPE, Add adds x's Reshape'd ones."""
    nodes, inits, x = [], [SHAPE], "x"
    for i, op in enumerate(ops):
        ins = {"Reshape": [x, "shape"], "Add": [x, "one"]}.get(op, [x])
        if op == "Add":
            inits.append(numpy_helper.from_array(np.ones([4, 3], np.float32), "one"))
        nodes.append(helper.make_node(op, ins, [f"v{i}"], name=op.lower() + str(i)))
        x = f"v{i}"
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [3, 4])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [4, 3])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def run(model, *backends):
    with make_runtime(*backends) as rt:
        net = rt.load(model, backends=[b.id for b in backends])
        x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
        got = net.run({"x": x})
        return net.placement, net.explain_placement(), next(iter(got.values()))


def test_a_reshape_between_another_backends_nodes_runs_there():
    placement, text, y = run(chain("Relu", "Reshape", "Sigmoid"),
                             NumpyBackend(id="layout", ops={"Reshape"}), NumpyBackend(id="main"))
    assert placement["reshape1"]["ran_on"] == "main", placement
    assert "moved to main" in placement["reshape1"]["declined"]["layout"], placement
    assert "reshape1: main\n    declined by layout: claimed it; moved to main" in text
    x = np.arange(-6, 6, dtype=np.float32).reshape(3, 4)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-np.maximum(x, 0).reshape(4, 3))), rtol=1e-6)


def test_a_reshape_of_the_graph_input_joins_its_only_reader():
    placement, _, _ = run(chain("Reshape", "Relu"), NumpyBackend(id="layout", ops={"Reshape"}),
                          NumpyBackend(id="main"))
    assert placement["reshape0"]["ran_on"] == "main", placement


def test_it_stays_where_the_neighbours_backend_does_not_run_it():
    placement, _, _ = run(chain("Relu", "Reshape", "Relu"),
                          NumpyBackend(id="layout", ops={"Reshape"}),
                          NumpyBackend(id="main", ops={"Relu"}))
    assert placement["reshape1"] == {"op": "Reshape", "ran_on": "layout", "declined": {}}


def test_it_stays_between_two_other_backends():
    placement, _, _ = run(chain("Sigmoid", "Reshape", "Relu"),
                          NumpyBackend(id="layout", ops={"Reshape"}),
                          NumpyBackend(id="s", ops={"Sigmoid", "Reshape"}),
                          NumpyBackend(id="r", ops={"Relu", "Reshape"}))
    assert placement["reshape1"]["ran_on"] == "layout", placement


def test_a_partition_that_also_computes_stays():
    placement, _, _ = run(chain("Relu", "Reshape", "Add", "Relu"),
                          NumpyBackend(id="layout", ops={"Reshape", "Add"}),
                          NumpyBackend(id="main"))
    assert placement["reshape1"]["ran_on"] == "layout", placement
    assert placement["add2"]["ran_on"] == "layout", placement
