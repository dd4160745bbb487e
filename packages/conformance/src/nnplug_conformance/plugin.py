"""The ``nnplug`` pytest plugin (entry point ``pytest11``): only the command-line options.

It is inert: it adds the ``--nnplug-*`` options and nothing else, so it never changes another
project's test run. The conformance checks themselves live in this package's test modules and
``conftest.py`` and run with ``pytest --pyargs nnplug_conformance --nnplug-backend NAME``.
"""

from __future__ import annotations


def pytest_addoption(parser):
    group = parser.getgroup("nnplug", "nnplug conformance suite (pytest --pyargs nnplug_conformance)")
    group.addoption("--nnplug-backend", metavar="NAME", default=None,
                    help="test the backend of this 'nnplug.backends' entry point name (or the "
                         "native library of this id in the backend folders)")
    group.addoption("--nnplug-backend-path", metavar="PATH", default=None,
                    help="test this native backend shared object directly")
    group.addoption("--nnplug-op", metavar="NAME", default=None,
                    help="test the custom ops of this 'nnplug.ops' entry point name")
    group.addoption("--nnplug-op-library", metavar="PATH", default=None,
                    help="test the custom ops of this native op library (libnnplug_op_*.so)")
    group.addoption("--nnplug-only-ops", metavar="OP[,OP...]", default=None,
                    help="run the ONNX node tests of these op types only")
    group.addoption("--nnplug-expanded", action="store_true", default=False,
                    help="also run ONNX's '_expanded' node tests (function bodies)")
    group.addoption("--nnplug-tolerance", metavar="OP=RTOL,ATOL", action="append", default=[],
                    help="override the tolerance of an op type (repeatable)")
    group.addoption("--nnplug-report", metavar="FILE", default=None,
                    help="also write the summary table as Markdown to FILE")


def active(config) -> bool:
    """Whether a thing to test was named on the command line."""
    return any(config.getoption(o, None) for o in
               ("nnplug_backend", "nnplug_backend_path", "nnplug_op", "nnplug_op_library"))


def pytest_configure(config):
    """Naming the suite without naming what to test is a usage error (nothing else happens)."""
    if active(config):
        return
    for arg in config.invocation_params.args:
        arg = str(arg).split("::")[0]
        if arg == "nnplug_conformance" or arg.startswith("nnplug_conformance."):
            import pytest

            raise pytest.UsageError(
                "nnplug_conformance: say what to test: --nnplug-backend NAME, --nnplug-backend-path "
                "PATH/TO/lib.so, --nnplug-op NAME or --nnplug-op-library PATH"
            )
