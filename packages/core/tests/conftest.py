import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from numpy_backend import NumpyBackend, make_runtime  # noqa: E402  (needs the path above)


@pytest.fixture
def rt():
    """A Runtime with only the test numpy backend registered, closed after the test."""
    r = make_runtime(NumpyBackend())
    yield r
    r.close()
