"""onnxruntime's session API over nnplug: ``InferenceSession``, ``SessionOptions``,
``RunOptions``, ``IOBinding``. Code written for onnxruntime runs by changing the import:

    import nnplug as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    outputs = sess.run(None, {sess.get_inputs()[0].name: x})

Providers are nnplug backend ids (``"cpu"``, ``"opencl"``) or onnxruntime provider names that
map to a device type (``"CPUExecutionProvider"`` -> the best CPU backend installed).
"""

from __future__ import annotations

import datetime
import enum
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from . import ranking
from .device import CPU
from .device import device as parse_device
from .errors import (
    ArgumentTypeError,
    BackendNotAvailableError,
    InputError,
    InvalidArgumentError,
    NnplugError,
    OptionError,
)
from .model_options import as_array, config_from_model, read_with_overrides
from .precision_hint import CONFIG_KEY as PRECISION_CONFIG_KEY
from .precision_hint import hinted_targets
from .profiling import Profiler
from .runcontext import RunContext, running
from .runtime import default_runtime
from .tensor import Tensor

if TYPE_CHECKING:  # onnx is imported when a session reads its model, not with nnplug
    import onnx

log = logging.getLogger("nnplug.session")


class GraphOptimizationLevel(enum.IntEnum):
    """onnxruntime's levels and the nnplug ones they map to: DISABLE_ALL -> ``"disable"``
    (no folding, no fusion), ENABLE_BASIC -> ``"basic"`` (constant folding), ENABLE_EXTENDED
    and above -> ``"all"`` (folding and backend fusion)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


EXTERNAL_DATA_FOLDER = "session.model_external_initializers_file_folder_path"
"""Session config entry (onnxruntime's name): where the external data files of a model given
as bytes are."""

_LEVEL_NAMES = {"disable": "disable", "disable_all": "disable", "basic": "basic",
                "enable_basic": "basic", "extended": "all", "enable_extended": "all",
                "layout": "all", "enable_layout": "all", "all": "all", "enable_all": "all"}


def optimization_of(level) -> str:
    """A graph optimisation level (this module's or onnxruntime's enum, its int, or a name
    such as ``"basic"``) as the ``optimization`` argument of ``Runtime.load``."""
    name = getattr(level, "name", None)  # onnxruntime's own enum values, or ours
    if isinstance(level, str) or name is not None:
        key = (name or level).lower().removeprefix("ort_")
        if key in _LEVEL_NAMES:
            return _LEVEL_NAMES[key]
    elif isinstance(level, int) and not isinstance(level, bool):
        if level <= 0:
            return "disable"
        return "basic" if level == 1 else "all"
    raise InvalidArgumentError(
        f"graph_optimization_level {level!r}: use GraphOptimizationLevel.ORT_DISABLE_ALL, "
        f"ORT_ENABLE_BASIC, ORT_ENABLE_EXTENDED or ORT_ENABLE_ALL (or 'disable', 'basic', 'all')")


class _Options:
    """Attribute-style options that refuse names they do not have (a typo would otherwise
    be ignored silently)."""

    _defaults: dict = {}
    _ignored: dict = {}  # onnxruntime options accepted without effect -> why

    def __init__(self):
        object.__setattr__(self, "_values", dict(self._defaults))
        object.__setattr__(self, "_config", {})

    def __getattr__(self, name):
        values = object.__getattribute__(self, "_values")
        if name in values:
            return values[name]
        raise OptionError(f"{type(self).__name__} has no option {name!r}; it has: "
                          f"{', '.join(sorted(values))}")

    def __setattr__(self, name, value):
        if name not in self._values:
            raise OptionError(f"{type(self).__name__} has no option {name!r}; it has: "
                              f"{', '.join(sorted(self._values))}")
        self._values[name] = self._check(name, value)

    def _check(self, name, value):
        return value

    def _config_entries(self) -> dict:
        return self._config

    def __repr__(self):
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self._values.items())})"


_MAX_CONFIG_KEY = 1024


def _int_option(owner, name, value, low, high=None):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < low or \
            (high is not None and value > high):
        span = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidArgumentError(f"{owner}.{name} must be an integer {span}, not {value!r}")
    return int(value)


class SessionOptions(_Options):
    """How an :class:`InferenceSession` loads and runs its model.

    - ``intra_op_num_threads``: worker threads of each backend the session uses (0: the
      backend's default). Native backends get it through their ``set_num_threads`` entry;
      the CPU backend has one pool per process, so the setting is process-wide.
    - ``graph_optimization_level``: see :class:`GraphOptimizationLevel`.
    - ``enable_profiling`` / ``profile_file_prefix``: record a Chrome trace of every run;
      :meth:`InferenceSession.end_profiling` writes ``<prefix>_<date>.json``.
    - ``log_severity_level``: 0 verbose, 1 info, 2 warning (default), 3 error, 4 fatal, for
      the session's messages (logger ``nnplug.session``).
    - ``inter_op_num_threads``, ``execution_mode``, ``enable_cpu_mem_arena``,
      ``enable_mem_pattern``, ``log_verbosity_level``: accepted for compatibility; nnplug runs
      partitions in order and plans memory itself.
    - ``device_policy``: with no providers, which device types go first in the default
      order: ``"default"``, ``"prefer_cpu"``, ``"prefer_gpu"``, ``"prefer_npu"`` (see
      :mod:`nnplug.ranking`).
    """

    _defaults = {
        "intra_op_num_threads": 0,
        "inter_op_num_threads": 0,
        "graph_optimization_level": GraphOptimizationLevel.ORT_ENABLE_ALL,
        "enable_profiling": False,
        "profile_file_prefix": "nnplug_profile",
        "log_severity_level": 2,
        "log_verbosity_level": 0,
        "execution_mode": ExecutionMode.ORT_SEQUENTIAL,
        "enable_cpu_mem_arena": True,
        "enable_mem_pattern": True,
        "optimized_model_filepath": "",
        "logid": "",
        "use_deterministic_compute": False,
        "device_policy": "default",
    }

    def _check(self, name, value):
        if name in ("intra_op_num_threads", "inter_op_num_threads", "log_verbosity_level"):
            return _int_option("SessionOptions", name, value, 0)
        if name == "log_severity_level":
            return _int_option("SessionOptions", name, value, 0, 4)
        if name == "graph_optimization_level":
            optimization_of(value)
            return value
        if name == "optimized_model_filepath":
            if not isinstance(value, (str, os.PathLike)):
                raise ArgumentTypeError(f"SessionOptions.optimized_model_filepath must be a path, "
                                        f"not {value!r}")
            return os.fspath(value)
        if name in ("enable_profiling", "enable_cpu_mem_arena", "enable_mem_pattern",
                    "use_deterministic_compute"):
            return bool(value)
        if name == "device_policy" and value not in ranking.POLICIES:
            raise InvalidArgumentError(f"SessionOptions.device_policy {value!r} is not one of "
                                       f"{', '.join(ranking.POLICIES)}")
        if name in ("profile_file_prefix", "logid") and not isinstance(value, str):
            raise ArgumentTypeError(f"SessionOptions.{name} must be a str, not {value!r}")
        return value

    def __init__(self):
        super().__init__()
        for name in ("_initializers", "_external_initializers", "_external_files",
                     "_free_dims_by_name", "_free_dims_by_denotation"):
            object.__setattr__(self, name, {})

    def copy(self) -> SessionOptions:
        other = type(self)()
        for name in ("_values", "_config", "_initializers", "_external_initializers",
                     "_external_files", "_free_dims_by_name", "_free_dims_by_denotation"):
            object.__setattr__(other, name, dict(getattr(self, name)))
        return other

    def add_session_config_entry(self, key: str, value: str) -> None:
        key, value = str(key), str(value)
        if not key or len(key) > _MAX_CONFIG_KEY:  # onnxruntime's limit and words
            raise InvalidArgumentError(f"Config key is empty or longer than maximum length "
                                       f"{_MAX_CONFIG_KEY}")
        self._config[key] = value

    def get_session_config_entry(self, key: str) -> str:
        try:
            return self._config[key]
        except KeyError:
            raise InvalidArgumentError(f"SessionOptions does not have configuration with key: "
                                       f"{key}") from None

    # -- what the model is loaded with (applied by nnplug.model_options) ------------------
    def add_initializer(self, name: str, value) -> None:
        """Use ``value`` (an array, Tensor or OrtValue) for the model's initializer ``name``."""
        self._initializers[str(name)] = as_array(value)

    def add_external_initializers(self, names, values) -> None:
        """The data of initializers the model keeps in external files, by tensor name."""
        names, values = list(names), list(values)
        if len(names) != len(values):
            raise InvalidArgumentError(f"add_external_initializers: {len(names)} names for "
                                       f"{len(values)} values")
        for name, value in zip(names, values):
            self._external_initializers[str(name)] = as_array(value)

    def add_external_initializers_from_files_in_memory(self, file_names, buffers,
                                                       lengths) -> None:
        """The contents of external data files, by the file name the model gives."""
        file_names, buffers, lengths = list(file_names), list(buffers), list(lengths)
        if not len(file_names) == len(buffers) == len(lengths):
            raise InvalidArgumentError(
                f"add_external_initializers_from_files_in_memory: {len(file_names)} names, "
                f"{len(buffers)} buffers and {len(lengths)} lengths; give one of each per file")
        for name, buf, length in zip(file_names, buffers, lengths):
            data = memoryview(buf).cast("B")
            if not 0 <= int(length) <= len(data):
                raise InvalidArgumentError(f"external file {name!r}: length {length} but the "
                                           f"buffer holds {len(data)} bytes")
            self._external_files[os.fspath(name)] = bytes(data[:int(length)])

    def add_free_dimension_override_by_name(self, dim_name: str, dim_value: int) -> None:
        """Fix the symbolic input dimension ``dim_name`` to ``dim_value``."""
        self._free_dims_by_name[str(dim_name)] = _int_option(
            "SessionOptions", f"free dimension {dim_name!r}", dim_value, 0)

    def add_free_dimension_override_by_denotation(self, denotation: str, dim_value: int) -> None:
        """Fix every free input dimension with this denotation (e.g. ``DATA_BATCH``)."""
        self._free_dims_by_denotation[str(denotation)] = _int_option(
            "SessionOptions", f"free dimension {denotation!r}", dim_value, 0)

    def _set_from_config(self, name: str, value) -> None:
        """An option from a model's ``ort_config`` metadata (onnxruntime's JSON types)."""
        if name not in self._values:
            raise OptionError(f"the model's ort_config sets {name!r}, which SessionOptions does "
                              f"not have")
        if name == "graph_optimization_level":
            value = GraphOptimizationLevel(int(value))
        elif name == "execution_mode":
            value = ExecutionMode(int(value))
        elif isinstance(self._defaults[name], bool):
            value = bool(value)
        setattr(self, name, value)


class RunOptions(_Options):
    """Options of one run: ``terminate`` (set it, from any thread, to stop runs using these
    options between kernels with :class:`nnplug.RunTerminatedError`), ``run_tag`` (names the
    run in errors and profiles; ``tag`` is the same), ``log_severity_level``."""

    _defaults = {"terminate": False, "run_tag": "", "logid": "", "log_severity_level": 2,
                 "log_verbosity_level": 0, "only_execute_path_to_fetches": False}

    def _check(self, name, value):
        if name == "log_severity_level":
            return _int_option("RunOptions", name, value, 0, 4)
        if name == "run_tag" and not isinstance(value, str):
            raise ArgumentTypeError(f"RunOptions.run_tag must be a str, not {value!r}")
        if name in ("terminate", "only_execute_path_to_fetches"):
            return bool(value)
        return value

    @property
    def tag(self) -> str:
        return self._values["run_tag"]

    @tag.setter
    def tag(self, value: str) -> None:
        self.run_tag = value

    def __setattr__(self, name, value):
        if name == "tag":
            name = "run_tag"
        super().__setattr__(name, value)

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[str(key)] = str(value)

    def get_run_config_entry(self, key: str) -> str:
        try:
            return self._config[key]
        except KeyError:
            raise InvalidArgumentError(f"no run config entry {key!r}") from None


# -- model description ---------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeArg:
    """An input or output as onnxruntime describes it: ``shape`` holds ints, the names of
    symbolic dimensions, and None for dimensions with neither; ``type`` is e.g.
    ``"tensor(float)"``."""

    name: str
    type: str
    shape: list = field(default_factory=list)

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


@dataclass(frozen=True)
class ModelMetadata:
    producer_name: str
    graph_name: str
    domain: str
    description: str
    graph_description: str
    version: int
    custom_metadata_map: dict


def type_string(tp: onnx.TypeProto) -> str:
    """onnxruntime's name of an ONNX type: ``tensor(float)``, ``seq(tensor(int64))``, ..."""
    import onnx

    which = tp.WhichOneof("value")
    if which == "tensor_type":
        elem = tp.tensor_type.elem_type
        return f"tensor({onnx.TensorProto.DataType.Name(elem).lower()})" if elem else "tensor(undefined)"
    if which == "sequence_type":
        return f"seq({type_string(tp.sequence_type.elem_type)})"
    if which == "map_type":
        key = onnx.TensorProto.DataType.Name(tp.map_type.key_type).lower()
        return f"map({key},{type_string(tp.map_type.value_type)})"
    if which == "optional_type":
        return f"optional({type_string(tp.optional_type.elem_type)})"
    if which == "sparse_tensor_type":
        return f"sparse_tensor({onnx.TensorProto.DataType.Name(tp.sparse_tensor_type.elem_type).lower()})"
    return "unknown"


def _node_arg(vi: onnx.ValueInfoProto) -> NodeArg:
    shape = []
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is not None and tt.HasField("shape"):
        for d in tt.shape.dim:
            shape.append(int(d.dim_value) if d.HasField("dim_value") else
                         (d.dim_param if d.HasField("dim_param") and d.dim_param else None))
    return NodeArg(vi.name, type_string(vi.type), shape)


# -- providers -----------------------------------------------------------------------------------
def get_available_providers(runtime=None) -> list[str]:
    """The backend ids a session can use, in the default order (see :mod:`nnplug.ranking`)."""
    return (runtime or default_runtime()).default_backends()


def resolve_providers(runtime, providers, policy: str = "default"
                      ) -> tuple[list[str], dict[str, dict]]:
    """Backend ids (in preference order) and per-backend options for ``providers``: a list
    of backend ids / onnxruntime names, each optionally as ``(name, options)``. An
    onnxruntime name stands for every backend that answers to it, best first (a device
    type's name, such as ``"CPUExecutionProvider"``, for every backend of that type); None:
    the runtime's default order, ``policy``'s device types first."""
    if providers is None:
        return runtime.default_backends(policy), {}
    if isinstance(providers, str):
        providers = [providers]
    available = runtime.backends
    ids, options = [], {}
    for p in providers:
        opts = {}
        if isinstance(p, tuple):
            if len(p) != 2 or not isinstance(p[1], dict):
                raise InvalidArgumentError(f"provider {p!r}: write it as (name, {{options}})")
            p, opts = p
        if not isinstance(p, str):
            raise ArgumentTypeError(f"a provider is a backend id or an onnxruntime provider "
                                    f"name, not {p!r}")
        group = _provider_backends(runtime, p, available)
        for bid, bopts in _share_options(group, opts, available).items():
            if bid not in ids:
                ids.append(bid)
                if bopts:
                    options[bid] = bopts
    if not ids:
        raise InvalidArgumentError("providers is empty: name at least one backend, or pass None")
    return ids, options


def _provider_backends(runtime, name: str, available: dict) -> list[str]:
    installed = ", ".join(available) or "none"
    if name in available:
        return [name]
    group = ranking.provider_backends(name, available.values())
    if group:
        return group
    if name in ranking.PROVIDER_DEVICE_TYPES:
        dtype = ranking.PROVIDER_DEVICE_TYPES[name]
        raise BackendNotAvailableError(
            f"provider {name!r} maps to a {dtype} backend, but none is installed (installed "
            f"backends: {installed})")
    if name.endswith("ExecutionProvider"):
        raise BackendNotAvailableError(
            f"onnxruntime provider {name!r} has no nnplug equivalent; use one of the installed "
            f"backends ({installed}) or one of the provider names nnplug maps: "
            f"{', '.join(ranking.PROVIDER_DEVICE_TYPES)}")
    raise BackendNotAvailableError(f"backend {name!r} is not available (installed: {installed})"
                               f"{runtime.missing_backend_hint(name)}")


def _share_options(group: list[str], opts: dict, available: dict) -> dict[str, dict]:
    """A provider's options among the backends it stands for: each backend gets the ones its
    Target kind declares; one that none declares goes to the first (best) backend, whose
    Target then refuses it with the kind's own message."""
    if len(group) == 1 or not opts:
        return {bid: dict(opts) for bid in group}
    from .target import get_target_kind

    declared = {bid: set(get_target_kind(available[bid].backend.target_kind_name).attrs)
                for bid in group}
    shared = {bid: {k: v for k, v in opts.items() if k in declared[bid]} for bid in group}
    for k, v in opts.items():
        if not any(k in d for d in declared.values()):
            shared[group[0]][k] = v
    return shared


# -- threads -------------------------------------------------------------------------------------
_thread_settings: dict[str, int] = {}  # backend id -> count the last session gave it
_thread_lock = threading.Lock()


def apply_threads(backends, num_threads: int) -> dict[str, str]:
    """Give ``num_threads`` to every backend; {backend id: what happened} for the log."""
    done = {}
    for info in backends:
        with _thread_lock:
            before = _thread_settings.get(info.id)
            try:
                info.backend.set_num_threads(num_threads)
            except NotImplementedError:
                done[info.id] = "has no thread setting (kept its default)"
                continue
            _thread_settings[info.id] = num_threads
        if before is not None and before != num_threads:
            log.warning("backend %r has one thread pool per process: intra_op_num_threads=%d "
                        "replaces %d set by an earlier session", info.id, num_threads, before)
        done[info.id] = f"{num_threads} thread(s)"
    return done


_SEVERITY = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR,
             4: logging.CRITICAL}


def _set_log_level(severity: int) -> None:
    log.setLevel(_SEVERITY[severity])
    if severity < 2 and not log.handlers:  # make info/verbose messages visible by default
        log.addHandler(logging.StreamHandler())


# -- the session ---------------------------------------------------------------------------------
class InferenceSession:
    """onnxruntime's ``InferenceSession`` on nnplug backends.

    ``path_or_bytes``: a model path, its bytes, or an ``onnx.ModelProto``. ``providers``:
    backend ids or onnxruntime provider names (see :func:`resolve_providers`); None: every
    installed backend in the runtime's order. ``runtime``: the :class:`nnplug.Runtime` to use
    (default: one shared by all sessions). Thread-safe: ``run`` may be called from many threads.
    """

    _profile_one_event_a_line = False
    """Write traces as a JSON array with one event a line (onnxruntime's layout)."""

    def __init__(self, path_or_bytes, sess_options: SessionOptions | None = None,
                 providers=None, provider_options=None, *, runtime=None, **kwargs):
        if kwargs:
            raise InvalidArgumentError(
                f"InferenceSession got unknown argument(s) {', '.join(sorted(kwargs))}")
        if sess_options is not None and not isinstance(sess_options, SessionOptions):
            raise ArgumentTypeError(f"sess_options must be a nnplug.SessionOptions, not "
                                    f"{type(sess_options).__name__}")
        self._options = sess_options or SessionOptions()
        self._runtime = runtime or default_runtime()
        self._source = path_or_bytes
        self._lock = threading.Lock()
        self._net = None
        self._profiler = None
        so = self._options
        _set_log_level(so.log_severity_level)
        if so.inter_op_num_threads or so.execution_mode == ExecutionMode.ORT_PARALLEL:
            log.info("inter_op_num_threads / ORT_PARALLEL have no effect: nnplug runs the "
                     "partitions of a network in order")
        if so.enable_profiling:
            self._profiler = Profiler()
        # onnxruntime's config entry for the folder of external data when the model is bytes
        from .plan_cache import CONFIG_KEY, cache_folder  # on the first session: its import

        entries = so._config_entries()
        # the session entry ("" turns it off), else as NNPLUG_PLAN_CACHE says (None)
        cache = entries.get(CONFIG_KEY)
        self._plan_cache = None if cache is None else (cache or False)
        self._model = read_with_overrides(path_or_bytes, so, entries.get(EXTERNAL_DATA_FOLDER),
                                          lazy=cache_folder(self._plan_cache) is not None)
        self._proto = self._model.proto  # large weights without their bytes: see model_file
        self._options = so = config_from_model(self._proto, so)
        if so.enable_profiling and self._profiler is None:
            self._profiler = Profiler()
        self._load(providers, provider_options)
        if so.optimized_model_filepath:
            from .optimized_model import write_optimized_model

            write_optimized_model(self._net, self._proto, so.optimized_model_filepath,
                                  so._config_entries())

    def _load(self, providers, provider_options) -> None:
        ids, options = resolve_providers(self._runtime, providers, self._options.device_policy)
        if provider_options is not None:
            if len(provider_options) != len(ids):
                raise InvalidArgumentError(
                    f"provider_options has {len(provider_options)} entries for {len(ids)} "
                    f"provider(s); give one dict per provider")
            for bid, opts in zip(ids, provider_options):
                if opts:
                    options[bid] = dict(opts)
        chosen = [self._runtime.backends[b] for b in ids if b in self._runtime.backends]
        threads = self._options.intra_op_num_threads
        if threads:  # before loading: backends size per-thread scratch when they plan
            for bid, what in apply_threads(chosen, threads).items():
                log.info("backend %r: %s", bid, what)
        targets = {bid: {"kind": self._runtime.backends[bid].backend.target_kind_name, **opts}
                   for bid, opts in options.items()}
        targets = hinted_targets(chosen, targets, self._options._config_entries().get(
            PRECISION_CONFIG_KEY))  # nnplug.precision: bf16 where a backend can
        t0 = time.perf_counter_ns()
        net = self._runtime.load(self._model, backends=ids, targets=targets or None,
                                 optimization=optimization_of(
                                     self._options.graph_optimization_level),
                                 plan_cache=self._plan_cache)
        if self._profiler is not None:
            self._profiler.op_types.update(net.op_types)
            self._profiler.add("model_loading", "session", t0, time.perf_counter_ns(),
                               {"backends": ids, "optimization": net.optimization})
        log.info("loaded %r on %s in %.1f ms", net.name, ", ".join(ids),
                 (time.perf_counter_ns() - t0) / 1e6)
        old, self._net = self._net, net
        self._providers = ids
        self._provider_options = {b: options.get(b, {}) for b in ids}
        if old is not None:
            old.close()

    # -- description ----------------------------------------------------------------------------
    def _graph_args(self, values, names) -> list[NodeArg]:
        by_name = {vi.name: vi for vi in values}
        return [_node_arg(by_name[n]) if n in by_name else NodeArg(n, "unknown", [])
                for n in names]

    def get_inputs(self) -> list[NodeArg]:
        return self._graph_args(self._proto.graph.input, [v.name for v in self._net.inputs])

    def get_outputs(self) -> list[NodeArg]:
        """As declared, with dimensions the model leaves open filled in by shape inference
        (as onnxruntime does)."""
        args = []
        for arg, info in zip(self._graph_args(self._proto.graph.output,
                                              [v.name for v in self._net.outputs]),
                             self._net.outputs):
            inferred = list(info.shape) if info.shape is not None else None
            if inferred is not None and not arg.shape:
                arg = NodeArg(arg.name, arg.type, inferred)
            elif inferred is not None and len(inferred) == len(arg.shape):
                arg = NodeArg(arg.name, arg.type,
                              [d if d is not None else i for d, i in zip(arg.shape, inferred)])
            args.append(arg)
        return args

    def get_overridable_initializers(self) -> list[NodeArg]:
        return []  # nnplug folds initializers into its kernels; they cannot be fed

    def get_modelmeta(self) -> ModelMetadata:
        m = self._proto
        return ModelMetadata(m.producer_name, m.graph.name, m.domain, m.doc_string,
                             m.graph.doc_string, int(m.model_version),
                             {p.key: p.value for p in m.metadata_props})

    def get_providers(self) -> list[str]:
        """The backend ids the session runs on, in preference order."""
        return list(self._providers)

    def get_provider_options(self) -> dict[str, dict]:
        return {b: dict(o) for b, o in self._provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        return self._options

    def set_providers(self, providers=None, provider_options=None) -> None:
        """Reload the model on other backends."""
        self._load(providers, provider_options)

    @property
    def network(self):
        """The :class:`nnplug.Network` behind the session (placement, ``run_many``...)."""
        return self._net

    # -- running --------------------------------------------------------------------------------
    def _context(self, run_options: RunOptions | None):
        if run_options is not None and not isinstance(run_options, RunOptions):
            raise ArgumentTypeError(f"run_options must be a nnplug.RunOptions, not "
                                    f"{type(run_options).__name__}")
        prof = self._profiler
        if prof is None and run_options is None:
            return None
        terminated = (lambda: run_options.terminate) if run_options is not None else None
        return RunContext(prof, terminated, run_options.run_tag if run_options else "")

    def _output_names(self, output_names) -> list[str] | None:
        if output_names is None:
            return None
        if isinstance(output_names, (list, tuple)) and not output_names:
            return None  # onnxruntime's run([], feeds): every output
        if isinstance(output_names, str):
            raise ArgumentTypeError(f"output_names is a list of names, not the str "
                                    f"{output_names!r}; write [{output_names!r}]")
        return list(output_names)

    def _run(self, fn, ctx, *args):
        if ctx is None:
            return fn(*args)
        ctx.check("the first node")
        with running(ctx):
            if ctx.profiler is None:
                return fn(*args)
            t0 = time.perf_counter_ns()
            try:
                return fn(*args)
            finally:
                ctx.profiler.add("model_run", "run", t0, time.perf_counter_ns(),
                                 {"tag": ctx.tag} if ctx.tag else {})

    def run(self, output_names, input_feed: dict, run_options: RunOptions | None = None) -> list:
        """Run the model: a list of numpy arrays, one per name in ``output_names`` (None or
        []: every output, in the model's order)."""
        if run_options is None and self._profiler is None:  # no run context: the short way
            return self._net.run_list(
                input_feed, None if output_names is None else self._output_names(output_names))
        ctx = self._context(run_options)
        return self._run(self._net.run_list, ctx, input_feed, self._output_names(output_names))

    def run_async(self, output_names, input_feed: dict, callback=None, user_data=None,
                  run_options: RunOptions | None = None):
        """Start a run on a worker thread. onnxruntime's form: ``callback(outputs, user_data,
        error_text)`` is called when it ends. Returns a ``concurrent.futures.Future`` of the
        output list as well."""
        from .batching import _executor

        future = _executor().submit(self.run, output_names, input_feed, run_options)
        if callback is not None:
            def done(f):
                err = f.exception()
                callback(None if err else f.result(), user_data, "" if err is None else str(err))

            future.add_done_callback(done)
        return future

    def io_binding(self) -> IOBinding:
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None):
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise ArgumentTypeError("run_with_iobinding takes an IOBinding from this session's "
                                    "io_binding()")
        ctx = self._context(run_options) or RunContext()
        feeds = [v for v in iobinding._inputs.values() if isinstance(v, np.ndarray)]
        ctx.outputs = {n: b for n, (_, b) in iobinding._outputs.items()  # never alias a feed
                       if isinstance(b, np.ndarray) and
                       not any(np.may_share_memory(b, f) for f in feeds)}
        names = list(iobinding._outputs) or [o.name for o in self._net.outputs]
        tensors = self._run(self._net.run_tensors, ctx, dict(iobinding._inputs), names)
        iobinding._store(tensors)

    def end_profiling(self) -> str:
        """Stop profiling and write the trace: its file name ("" when profiling is off)."""
        with self._lock:
            prof, self._profiler = self._profiler, None
        if prof is None:
            return ""
        stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
        path = f"{self._options.profile_file_prefix}_{stamp}.json"
        return prof.write(path, one_event_a_line=self._profile_one_event_a_line)

    def get_profiling_start_time_ns(self) -> int:
        prof = self._profiler
        return prof.start_ns if prof is not None else 0

    def close(self) -> None:
        if self._net is not None:
            self._net.close()

    def __enter__(self) -> InferenceSession:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self):
        return f"<nnplug.InferenceSession {self._net.name!r} providers={self._providers}>"


# -- IO binding ----------------------------------------------------------------------------------
class IOBinding:
    """Inputs and outputs bound ahead of a run (onnxruntime's ``IOBinding``).

    ``bind_input(name, value)``: an array, a Tensor (one already on a backend's device is
    used there without a copy) or any DLPack object. ``bind_output(name)``: the output stays
    where its backend made it (a Tensor, exportable with DLPack); with ``device_type`` it is
    moved there; with ``buffer`` (a numpy array or a Tensor of the right shape and dtype)
    the result is written into it.
    """

    def __init__(self, session: InferenceSession):
        self._session = session
        self._inputs: dict = {}
        self._outputs: dict[str, tuple] = {}
        self._results: list[Tensor] | None = None

    def bind_input(self, name: str, value, *rest) -> None:
        if rest:
            raise InvalidArgumentError(
                "bind_input(name, value): nnplug binds arrays, Tensors or DLPack objects, not "
                "raw (device, type, shape, pointer) descriptions")
        self._inputs[name] = value

    bind_cpu_input = bind_input

    def bind_output(self, name: str, device_type: str | None = None, device_id: int = 0,
                    buffer=None) -> None:
        known = [o.name for o in self._session._net.outputs]
        if name not in known:
            raise InputError(f"bind_output: {name!r} is not an output of the model; its "
                             f"outputs: {', '.join(known)}")
        dev = None if device_type is None else parse_device(device_type, device_id)
        if buffer is not None and not isinstance(buffer, (np.ndarray, Tensor)):
            raise ArgumentTypeError(f"bind_output({name!r}): buffer must be a numpy array or "
                                    f"an nnplug Tensor, not {type(buffer).__name__}")
        if isinstance(buffer, np.ndarray) and not (buffer.flags.c_contiguous and
                                                   buffer.flags.writeable):
            raise InvalidArgumentError(f"bind_output({name!r}): the buffer must be a writable, "
                                       f"C-contiguous array")
        self._outputs[name] = (dev, buffer)

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = None

    def synchronize_inputs(self) -> None:
        """Nothing to wait for: nnplug copies (or not) inside the run."""

    def synchronize_outputs(self) -> None:
        """Nothing to wait for: outputs are complete when the run returns."""

    def _store(self, tensors: dict) -> None:
        results = []
        for name, t in tensors.items():
            dev, buffer = self._outputs.get(name, (None, None))
            if buffer is not None:
                t = _write_into(name, t, buffer)
            elif dev is not None:
                t = t.to(dev)
            results.append(t)
        self._results = results

    def get_outputs(self) -> list[Tensor]:
        """The outputs of the last run, as Tensors (``.numpy()``, DLPack)."""
        if self._results is None:
            raise NnplugError("no outputs yet: call session.run_with_iobinding(binding) first")
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        return [t.numpy() for t in self.get_outputs()]


def _write_into(name: str, t: Tensor, buffer) -> Tensor:
    shape, dtype = tuple(buffer.shape), np.dtype(buffer.dtype)
    if shape != t.shape or dtype != t.dtype:
        raise InputError(f"output {name!r} is {t.dtype} {list(t.shape)}, but the buffer bound "
                         f"to it is {dtype} {list(shape)}")
    if isinstance(buffer, np.ndarray):
        if not (t.is_host and t.handle is buffer):  # the backend did not write it in place
            np.copyto(buffer, t.numpy())
        return Tensor.from_numpy(buffer)
    if buffer.is_host:
        np.copyto(buffer.handle, t.numpy())
    elif t.nbytes:
        src_dev = t.device if not t.is_host and t.api is buffer.api else CPU
        src = t.handle if src_dev != CPU else t.numpy()
        buffer.api.copy_data_from_to(src, t.byte_offset if src_dev != CPU else 0,
                                     buffer.handle, buffer.byte_offset, t.nbytes, src_dev,
                                     buffer.device)
    return buffer


__all__ = ["ExecutionMode", "GraphOptimizationLevel", "IOBinding", "InferenceSession",
           "ModelMetadata", "NodeArg", "RunOptions", "SessionOptions", "default_runtime",
           "get_available_providers", "optimization_of", "resolve_providers"]
