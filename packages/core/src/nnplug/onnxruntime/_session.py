"""onnxruntime's ``InferenceSession``, ``SessionOptions``, ``RunOptions`` and ``IOBinding``:
nnplug's own session (:mod:`nnplug.session`) with onnxruntime's provider names, exception
types, OrtValues, raw-pointer IO binding and trace layout."""

from __future__ import annotations

import ctypes
import enum
import os

import numpy as np

from .. import session as base
from ..errors import InvalidArgumentError, NnplugError
from ._devices import memory_info_of
from ._errors import Fail, NoSuchFile, OrtRuntimeError, ort_errors, translate
from ._providers import backend_ids, provider_name
from ._values import OrtValue, OrtValueVector

ndarray = np.ndarray
_run = base.InferenceSession.run  # called by name: super() costs a run 0.1 us
GraphOptimizationLevel = base.GraphOptimizationLevel
ExecutionMode = base.ExecutionMode
NodeArg = base.NodeArg
ModelMetadata = base.ModelMetadata

RECORD_ASSIGNMENT = "session.record_ep_graph_assignment_info"


class ExecutionOrder(enum.IntEnum):
    DEFAULT = 0
    PRIORITY_BASED = 1
    MEMORY_EFFICIENT = 2


class SessionOptions(base.SessionOptions):
    """nnplug's SessionOptions with onnxruntime's defaults and error types."""

    _defaults = {**base.SessionOptions._defaults, "profile_file_prefix": "onnxruntime_profile_",
                 "execution_order": ExecutionOrder.DEFAULT, "enable_mem_reuse": True,
                 "use_per_session_threads": True}

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_op_libraries", [])

    def set_provider_selection_policy(self, policy) -> None:
        """onnxruntime's automatic provider selection: sets ``device_policy``."""
        from ._devices import DEVICE_POLICIES, OrtExecutionProviderDevicePolicy

        self.device_policy = DEVICE_POLICIES[OrtExecutionProviderDevicePolicy(policy)]

    def copy(self) -> SessionOptions:
        other = super().copy()
        object.__setattr__(other, "_op_libraries", list(self._op_libraries))
        return other

    def add_session_config_entry(self, key: str, value: str) -> None:
        try:
            super().add_session_config_entry(key, value)
        except InvalidArgumentError as e:  # onnxruntime raises a plain RuntimeError here
            raise OrtRuntimeError(str(e)) from None

    def get_session_config_entry(self, key: str) -> str:
        try:
            return super().get_session_config_entry(key)
        except InvalidArgumentError as e:
            raise OrtRuntimeError(str(e)) from None

    def register_custom_ops_library(self, library_path: str) -> None:
        """A custom-op library, registered on the session's Runtime when it loads: one built
        for onnxruntime's custom-op C API (``RegisterCustomOps``, e.g.
        ``onnxruntime_extensions.get_library_path()``) or for nnplug's
        (``nnplug/custom_op.h``). See docs/custom-ops.md."""
        if not os.path.isfile(library_path):
            raise OrtRuntimeError(f"custom op library {library_path!r} does not exist")
        self._op_libraries.append(os.fspath(library_path))


class RunOptions(base.RunOptions):
    """nnplug's RunOptions; ``add_active_adapter`` keeps LoRA adapters for the run."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_adapters", [])

    def add_active_adapter(self, adapter) -> None:
        self._adapters.append(adapter)


class OrtEpAssignedNode:
    def __init__(self, name: str, op_type: str, domain: str):
        self.name, self.op_type, self.domain = name, op_type, domain

    def __repr__(self):
        return f"OrtEpAssignedNode({self.domain}:{self.op_type}/{self.name})"


class OrtEpAssignedSubgraph:
    """The nodes one backend runs as one unit (a kernel, or a whole partition)."""

    def __init__(self, ep_name: str, nodes: list[OrtEpAssignedNode]):
        self.ep_name = ep_name
        self._nodes = nodes

    def get_nodes(self) -> list[OrtEpAssignedNode]:
        return list(self._nodes)


class InferenceSession(base.InferenceSession):
    """onnxruntime's InferenceSession on nnplug's backends (see the package docstring)."""

    _profile_one_event_a_line = True

    @ort_errors
    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        if isinstance(path_or_bytes, (str, os.PathLike)) and not os.path.exists(path_or_bytes):
            name = os.fspath(path_or_bytes)
            raise NoSuchFile(f"Load model from {name} failed:Load model {name} failed. File "
                             f"doesn't exist")
        runtime = kwargs.pop("runtime", None) or base.default_runtime()
        kwargs.pop("disabled_optimizers", None)  # onnxruntime's rule names: none apply here
        so = sess_options if sess_options is not None else SessionOptions()
        for path in getattr(so, "_op_libraries", ()):
            if not any(op.source == path for op in runtime.ops.values()
                       if hasattr(op, "source")):
                runtime.register_custom_ops_library(path)
        ids, self._provider_names = backend_ids(runtime, providers, provider_options)
        super().__init__(path_or_bytes, so, ids, None, runtime=runtime, **kwargs)

    # -- providers ------------------------------------------------------------------------
    def get_providers(self) -> list[str]:
        """In the names the session was given (the CPU provider last, as onnxruntime adds
        it); without providers, the names of the backends it uses, best first."""
        if self._provider_names:
            return list(self._provider_names)
        return list(dict.fromkeys(provider_name(self._runtime, b) for b in self._providers))

    def get_provider_options(self) -> dict[str, dict]:
        out = {}
        for b in self._providers:
            out.setdefault(provider_name(self._runtime, b),
                           {k: str(v) for k, v in self._provider_options.get(b, {}).items()})
        return out

    @ort_errors
    def set_providers(self, providers=None, provider_options=None) -> None:
        ids, names = backend_ids(self._runtime, providers, provider_options)
        self._load(ids, None)
        self._provider_names = names

    def enable_fallback(self) -> None:
        """The CPU backend is always the last fallback here."""

    def disable_fallback(self) -> None:
        """The CPU backend is always the last fallback here."""

    def get_tuning_results(self) -> list:
        return []  # nnplug's backends tune nothing at run time

    def set_tuning_results(self, results, error_on_invalid: bool = False) -> None:
        providers = self.get_providers()
        for r in results:
            if r.get("ep") not in providers and error_on_invalid:
                raise OrtRuntimeError(f"Cannot find execution provider {r.get('ep')}")

    # -- description ----------------------------------------------------------------------
    def get_input_memory_infos(self) -> list:
        """Where ``run`` takes each input: host memory (nnplug copies to devices itself)."""
        return [memory_info_of("cpu") for _ in self._net.inputs]

    def get_output_memory_infos(self) -> list:
        return [memory_info_of("cpu") for _ in self._net.outputs]

    def get_input_epdevices(self) -> list:
        return [None for _ in self._net.inputs]

    def get_provider_graph_assignment_info(self) -> list[OrtEpAssignedSubgraph]:
        """The nodes each backend runs, one entry per unit it runs them in."""
        if self._options._config_entries().get(RECORD_ASSIGNMENT) != "1":
            raise Fail(f"Session configuration entry '{RECORD_ASSIGNMENT}' must be set to \"1\" "
                       f"to retrieve EP graph assignment information.")
        nodes = {n.name: n for n in self._net.nodes}
        out = []
        for step in self._net._steps:
            assigned = [OrtEpAssignedNode(n, nodes[n].op_type, nodes[n].domain)
                        for n in step.nodes if n in nodes]
            if assigned:
                label = step.label.split(" ")[0]
                name = provider_name(self._runtime, label) if label in self._runtime.backends \
                    else label
                out.append(OrtEpAssignedSubgraph(name, assigned))
        return out

    # -- running --------------------------------------------------------------------------
    def _feeds(self, input_feed: dict) -> dict:
        try:
            complete = input_feed.keys() >= self._net._input_table.keys()
        except AttributeError:
            complete = False  # not a dict: the run says what it takes
        if not complete:
            for name in self._net._input_table:
                if name not in input_feed:  # onnxruntime's check and words
                    missing = [i.name for i in self._net.inputs if i.name not in input_feed]
                    raise ValueError(f"Required inputs ({missing}) are missing from input "
                                     f"feed ({list(input_feed)}).")
        for v in input_feed.values():
            if type(v) is not ndarray and isinstance(v, OrtValue):
                return {k: v.feed() if isinstance(v, OrtValue) else v
                        for k, v in input_feed.items()}
        return input_feed  # arrays as they are (the run reads the dict, never writes it)

    def run(self, output_names, input_feed: dict, run_options=None) -> list:
        try:  # what @ort_errors does, without a frame more on every run
            if run_options is None and self._profiler is None:  # the host path, as _run's
                fast = self._net._host_path  # ([]: every output; a str is refused by _run)
                out = None if fast is None else fast.run(input_feed, output_names or None)
                if out is not None:
                    return out
            return _run(self, output_names, self._feeds(input_feed), run_options)
        except NnplugError as e:
            t = translate(e)
            if t is e:
                raise
            raise t from e

    @ort_errors
    def run_with_ort_values(self, output_names, input_dict_ort_values: dict,
                            run_options=None) -> list[OrtValue]:
        """Run on OrtValues; the outputs as OrtValues (left where their backend made them)."""
        ctx = self._context(run_options)
        names = self._output_names(output_names) or [o.name for o in self._net.outputs]
        tensors = self._run(self._net.run_tensors, ctx, self._feeds(input_dict_ort_values),
                            names)
        return [OrtValue.of(tensors[n]) for n in names]

    @property
    def _sess(self) -> _CSession:
        return _CSession(self)

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    @ort_errors
    def run_with_iobinding(self, iobinding, run_options=None) -> None:
        super().run_with_iobinding(iobinding, run_options)


class _CSession:
    """The ``sess._sess`` layer onnxruntime's code reaches into."""

    def __init__(self, session: InferenceSession):
        self._session = session

    def run_with_ort_values(self, feeds: dict, output_names, run_options=None) -> OrtValueVector:
        return OrtValueVector(self._session.run_with_ort_values(output_names, feeds, run_options))

    def run(self, output_names, input_feed, run_options=None):
        return self._session.run(output_names, input_feed, run_options)


# -- IO binding ----------------------------------------------------------------------------------
def _host_array(ptr: int, element_type, shape) -> np.ndarray:
    """An array over a CPU pointer given as an int (onnxruntime's ``buffer_ptr``)."""
    dtype = np.dtype(element_type)
    shape = [int(d) for d in shape]
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = (ctypes.c_char * max(nbytes, 1)).from_address(int(ptr))
    return np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize).reshape(shape)


def _is_cpu(device_type) -> bool:
    return str(device_type).lower() == "cpu"


class IOBinding(base.IOBinding):
    """onnxruntime's IOBinding: arrays, OrtValues or CPU pointers in; outputs as OrtValues."""

    def __init__(self, session: InferenceSession):
        super().__init__(session)

    @ort_errors
    def bind_input(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                   buffer_ptr=None) -> None:
        if isinstance(device_type, (np.ndarray, OrtValue)) or hasattr(device_type, "__dlpack__"):
            value = device_type  # nnplug's form: bind_input(name, value)
            super().bind_input(name, value.feed() if isinstance(value, OrtValue) else value)
            return
        if buffer_ptr is None or shape is None or element_type is None:
            raise InvalidArgumentError(f"bind_input({name!r}): give element_type, shape and "
                                       f"buffer_ptr (or bind an array with bind_cpu_input)")
        if not _is_cpu(device_type):
            raise InvalidArgumentError(
                f"bind_input({name!r}): nnplug binds raw pointers to CPU memory only; bind a "
                f"{device_type} tensor as an OrtValue (OrtValue.ortvalue_from_numpy(x, "
                f"{device_type!r})) or through DLPack")
        super().bind_input(name, _host_array(buffer_ptr, element_type, shape))

    def bind_cpu_input(self, name, arr_on_cpu) -> None:
        super().bind_input(name, arr_on_cpu)

    def bind_ortvalue_input(self, name, ortvalue: OrtValue) -> None:
        super().bind_input(name, ortvalue.feed())

    @ort_errors
    def bind_output(self, name, device_type="cpu", device_id=0, element_type=None, shape=None,
                    buffer_ptr=None) -> None:
        if buffer_ptr is None:
            dev = None if device_type is None else (
                "cpu" if _is_cpu(device_type) else device_type)
            super().bind_output(name, dev, device_id)
            return
        if not _is_cpu(device_type):
            raise InvalidArgumentError(f"bind_output({name!r}): nnplug binds raw pointers to "
                                       f"CPU memory only")
        super().bind_output(name, buffer=_host_array(buffer_ptr, element_type, shape))

    @ort_errors
    def bind_ortvalue_output(self, name, ortvalue: OrtValue) -> None:
        t = ortvalue._tensor()
        super().bind_output(name, buffer=t.handle if t.is_host else t)

    def get_outputs(self) -> OrtValueVector:
        return OrtValueVector(OrtValue.of(t) for t in super().get_outputs())

    get_outputs_as_ortvaluevector = get_outputs

    def copy_outputs_to_cpu(self) -> list:
        return [v.numpy() for v in self.get_outputs()]


def get_default_session_options() -> SessionOptions:
    return SessionOptions()


__all__ = ["ExecutionMode", "ExecutionOrder", "GraphOptimizationLevel", "IOBinding",
           "InferenceSession", "ModelMetadata", "NodeArg", "OrtEpAssignedNode",
           "OrtEpAssignedSubgraph", "RunOptions", "SessionOptions", "get_default_session_options"]
