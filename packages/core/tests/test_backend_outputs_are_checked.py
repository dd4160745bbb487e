"""What a backend's module returns is checked against the model's shapes and dtypes."""

from __future__ import annotations

import numpy as np
import pytest
from models import mlp, single_op
from numpy_backend import KERNELS, NumpyBackend, make_runtime

import nnplug


class Doubling(NumpyBackend):
    """Its Relu returns twice as many rows as it should: a broken kernel."""

    id = "doubling"

    def build(self, subgraph, target):
        module = super().build(subgraph, target)
        run = module["run"]

        def broken(inputs):
            return [nnplug.Tensor.from_numpy(np.concatenate([t.numpy(), t.numpy()]))
                    for t in run(inputs)]

        return nnplug.Module({"run": broken})


@pytest.mark.parametrize("shape", [[3, 4], ["N", 4]])
def test_a_backend_returning_another_shape_is_an_error_naming_it_node_and_shapes(shape):
    with make_runtime(Doubling()) as rt, rt.load(single_op("Relu", [shape])) as net:
        with pytest.raises(nnplug.BackendError) as info:
            net.run({"in0": np.ones((3, 4), np.float32)})
    text = str(info.value)
    for needle in ("doubling", "'out'", "node", "[6, 4]", "dim 0 must be 3"):
        assert needle in text, f"{needle!r} not in: {text}"


def test_right_outputs_with_symbolic_dims_pass():
    assert "Relu" in KERNELS
    with make_runtime(NumpyBackend()) as rt, rt.load(mlp()) as net:
        for n in (1, 5):
            assert net.run({"x": np.ones((n, 4), np.float32)})["y"].shape == (n, 3)
