"""onnxruntime's provider names over nnplug's backends.

A backend answers to the onnxruntime names it declares (``provider_names``; e.g. a oneDNN
backend declares ``DnnlExecutionProvider``), and to its device type's
(``CPUExecutionProvider`` for every CPU backend, ``OpenCLExecutionProvider``); see
:mod:`nnplug.ranking`. Names are turned into backend ids by
:func:`nnplug.session.resolve_providers`; this module adds onnxruntime's rules: a provider
onnxruntime knows but nothing here can run is skipped with onnxruntime's warning, an unknown
name is onnxruntime's ``RuntimeError``, the CPU provider is always the last fallback, and a
session answers ``get_providers()`` in the names it was given.
"""

from __future__ import annotations

import warnings

from .. import ranking
from ..ranking import PROVIDER_DEVICE_TYPES
from ..session import default_runtime, resolve_providers
from ._errors import OrtRuntimeError

CPU = "CPUExecutionProvider"

ALL_PROVIDERS = [
    "TensorrtExecutionProvider", "CUDAExecutionProvider", "MIGraphXExecutionProvider",
    "OpenVINOExecutionProvider", "DnnlExecutionProvider", "VitisAIExecutionProvider",
    "QNNExecutionProvider", "NnapiExecutionProvider", "VSINPUExecutionProvider",
    "JsExecutionProvider", "CoreMLExecutionProvider", "DmlExecutionProvider",
    "RknpuExecutionProvider", "WebNNExecutionProvider", "WebGpuExecutionProvider",
    "XnnpackExecutionProvider", "CANNExecutionProvider", "AzureExecutionProvider", CPU,
]
"""Every provider onnxruntime knows, highest priority first (its ``get_all_providers``)."""

def provider_name(runtime, backend_id: str) -> str:
    """The onnxruntime name that names one backend: the first it declares, else its device
    type's, else its id."""
    info = runtime.backends.get(backend_id)
    if info is None:
        return backend_id
    declared = tuple(getattr(info.backend, "provider_names", ()))
    names = ranking.provider_names(info)
    return declared[0] if declared else (names[0] if names else backend_id)


def _dedupe(names):
    return list(dict.fromkeys(names))


def available_providers(runtime=None) -> list[str]:
    """onnxruntime names of the installed backends, in the order sessions use them when
    given none (nnplug's preference order)."""
    runtime = runtime or default_runtime()
    ids, _ = resolve_providers(runtime, None)
    return _dedupe(provider_name(runtime, b) for b in ids if b in runtime.backends)


def all_providers(runtime=None) -> list[str]:
    """onnxruntime's list, with the names of installed backends it lacks before the CPU."""
    extra = [n for n in available_providers(runtime) if n not in ALL_PROVIDERS]
    return ALL_PROVIDERS[:-1] + extra + [CPU]


def backend_ids(runtime, providers, provider_options=None) -> tuple[list | None, list | None]:
    """onnxruntime's ``providers``/``provider_options`` as what nnplug's session takes
    (backend ids and onnxruntime names it knows, ``(name, options)`` where options are given,
    the CPU's last), and the names ``get_providers()`` answers with. (None, None) for None:
    nnplug's default order."""
    if providers is None:
        return None, None
    if isinstance(providers, str):
        providers = [providers]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if "
                         "both are given.")
    infos = list(runtime.backends.values())
    chosen: dict[str, dict] = {}
    for k, p in enumerate(providers):
        name, opts = p if isinstance(p, tuple) else (p, None)
        if provider_options is not None:
            opts = provider_options[k]
        if not isinstance(name, str):
            raise ValueError("'providers' values must be either strings or (string, dict) "
                             "tuples.")
        if name in runtime.backends or ranking.provider_backends(name, infos):
            chosen.setdefault(name, dict(opts or {}))
        elif name in ALL_PROVIDERS or name in PROVIDER_DEVICE_TYPES:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_providers(runtime))}'",
                          stacklevel=4)
        else:
            raise OrtRuntimeError(f"Unknown Provider Type: {name}")
    if ranking.provider_backends(CPU, infos):  # onnxruntime always falls back to its CPU provider
        chosen.setdefault(CPU, {})
    if not chosen:
        return None, None
    names = [provider_name(runtime, n) if n in runtime.backends else n for n in chosen]
    return [(n, opts) if opts else n for n, opts in chosen.items()], list(dict.fromkeys(names))


def check_and_normalize_provider_args(providers, provider_options, available_provider_names):
    """onnxruntime's argument check: ``(providers, provider_options)`` as two lists of equal
    length, options as ``{str: str}``; duplicates dropped with a warning (first kept);
    ``ValueError`` for malformed arguments."""
    if providers is None:
        return [], []
    provider_name_to_options: dict = {}

    def set_options(name, options):
        if name not in available_provider_names:
            warnings.warn(f"Specified provider '{name}' is not in available provider names."
                          f"Available providers: '{', '.join(available_provider_names)}'",
                          stacklevel=3)
        if name in provider_name_to_options:
            warnings.warn(f"Duplicate provider '{name}' encountered, ignoring.", stacklevel=3)
            return
        provider_name_to_options[name] = {str(k): str(v) for k, v in options.items()}

    if not isinstance(providers, (list, tuple)):
        raise ValueError("'providers' should be a sequence.")
    if provider_options is not None:
        if not isinstance(provider_options, (list, tuple)):
            raise ValueError("'provider_options' should be a sequence.")
        if len(providers) != len(provider_options):
            raise ValueError("'providers' and 'provider_options' should be the same length if "
                             "both are given.")
        if not all(isinstance(p, str) for p in providers):
            raise ValueError("Only string values for 'providers' are supported if "
                             "'provider_options' is given.")
        if not all(isinstance(o, dict) for o in provider_options):
            raise ValueError("'provider_options' values must be dicts.")
        for name, options in zip(providers, provider_options):
            set_options(name, options)
    else:
        for p in providers:
            if isinstance(p, str):
                set_options(p, {})
            elif (isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                  and isinstance(p[1], dict)):
                set_options(p[0], p[1])
            else:
                raise ValueError("'providers' values must be either strings or "
                                 "(string, dict) tuples.")
    return list(provider_name_to_options), list(provider_name_to_options.values())


__all__ = ["ALL_PROVIDERS", "CPU", "all_providers", "available_providers",
           "backend_ids", "check_and_normalize_provider_args", "provider_name"]
