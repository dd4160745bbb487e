"""Where nnplug's C headers are: plugins compile against them (``nnplug.get_include()``)."""

import os


def get_include() -> str:
    """The folder holding nnplug's C headers (``#include <nnplug/backend.h>``)."""
    return os.path.join(os.path.dirname(__file__), "include")
