"""nnplug promises native backends its constants (ABI 1.8: NNP_HOST_KEEPS_CONSTANTS in init's
host_flags): the const_data a kernel is created with stays valid and unchanged until that kernel
is destroyed, so a kernel may read it at run time instead of copying it. testbackend.c's
'testown' kernels keep the pointers when told so, and check when destroyed that the bytes did
not change."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from nativelib import Stats, bare_runtime
from test_end_to_end import _x, mlp, reference

from nnplug.native import abi


def test_init_is_told_that_the_host_keeps_its_constants(libs):
    with bare_runtime() as rt:
        rt.register_backend(libs["testown"])
        assert Stats(libs["testown"])()["host_flags"] == abi.HOST_KEEPS_CONSTANTS


@pytest.mark.parametrize("ending", ["closed", "collected"])
def test_kernels_reading_the_hosts_constants_answer_right_until_destroyed(libs, ending):
    stats = Stats(libs["testown"])
    before = stats()
    model = mlp()
    x = _x(2)
    want = reference(model, {"x": x})
    with bare_runtime() as rt:
        rt.register_backend(libs["testown"])
        net = rt.load(model.SerializeToString())  # from bytes: only nnplug holds the weights
        del model
        gc.collect()
        junk = [np.full(1 << 14, np.nan, np.float32) for _ in range(64)]  # takes freed memory
        for _ in range(3):
            np.testing.assert_allclose(net.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
        del junk
        assert stats()["kept_constants"] - before["kept_constants"] >= 4  # w1, b1, w2, b2
        if ending == "closed":
            net.close()
        del net
        gc.collect()
        after = stats()
    assert after["kernels_live"] == before["kernels_live"]
    assert after["changed_at_destroy"] == before["changed_at_destroy"]


def test_constants_mapped_from_the_plan_cache_are_kept_too(libs, tmp_path):
    """A second load maps its constants from the cache entry; the kernels read them there."""
    stats = Stats(libs["testown"])
    model, x = mlp(), _x(2)
    want = reference(model, {"x": x})
    path = tmp_path / "mlp.onnx"
    path.write_bytes(model.SerializeToString())
    with bare_runtime() as rt:
        rt.register_backend(libs["testown"])
        for _ in range(2):
            before = stats()
            with rt.load(str(path), plan_cache=str(tmp_path / "plans")) as net:
                np.testing.assert_allclose(net.run({"x": x})["y"], want, rtol=1e-5, atol=1e-5)
            assert stats()["changed_at_destroy"] == before["changed_at_destroy"]
    assert any((tmp_path / "plans").rglob("*")), "no entry was written"
