import numpy as np
import pytest

import nnplug
from nnplug import Tensor


def test_host_tensor_wraps_numpy_without_copy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = Tensor.from_numpy(a)
    assert t.numpy() is a
    assert (t.shape, t.dtype, t.device) == ((2, 3), np.float32, nnplug.CPU)


def test_dlpack_round_trip_with_numpy_is_zero_copy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = nnplug.from_dlpack(a)
    assert t.numpy().ctypes.data == a.ctypes.data
    back = np.from_dlpack(t)
    assert back.ctypes.data == a.ctypes.data
    back[0, 0] = 42
    assert a[0, 0] == 42
    assert t.__dlpack_device__() == (1, 0)


def test_from_dlpack_refuses_objects_without_the_protocol():
    with pytest.raises(TypeError, match="does not implement __dlpack__"):
        nnplug.from_dlpack([1, 2, 3])


def test_to_cpu_is_identity_on_the_host():
    t = Tensor.from_numpy(np.ones(3, np.float32))
    assert t.to("cpu") is t
