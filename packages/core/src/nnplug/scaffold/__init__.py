"""``nnplug new``: generate an out-of-tree backend or op package from the templates in
``templates/`` (package data; see docs/authoring.md)."""

from .generate import Spec, generate, new_main

__all__ = ["Spec", "generate", "new_main"]
