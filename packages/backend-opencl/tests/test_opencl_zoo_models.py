"""Every model of onnx's light zoo runs entirely on the OpenCL device and matches the
expected output shipped with it (the tolerances of onnx's own backend test)."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import zoo_case, zoo_names

TOLERANCE = {"densenet121": 2e-3}


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_model_matches_expected_output(rt, name):
    path, feeds, expected = zoo_case(name)
    with rt.load(path, backends=["opencl"]) as net:
        placed = set(net.assignment.values())
        assert placed <= {"opencl", "opencl (folded)"}, f"nodes left the device: {placed}"
        (out,) = net.run(feeds).values()
    np.testing.assert_allclose(out, expected, rtol=TOLERANCE.get(name, 1e-3), atol=1e-7)
