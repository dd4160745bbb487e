"""Native plugins: the C ABI headers and the host side of native (dynamic) backends."""

from __future__ import annotations

import os


def get_include() -> str:
    """The folder holding ``nnplug/backend.h`` and ``nnplug/common.h`` (pass it to ``-I``)."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "include")
