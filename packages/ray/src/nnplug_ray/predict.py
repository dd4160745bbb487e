"""predict(): one call for the common case, a Dataset in, the Dataset with outputs out."""

from __future__ import annotations

import os

from nnplug import InputError, ModelError

from .predictor import Predictor

DEFAULT_BATCH_SIZE = 32


def model_bytes(model) -> bytes:
    """A model given as a path, bytes or ``onnx.ModelProto``, as bytes."""
    if isinstance(model, (bytes, bytearray, memoryview)):
        return bytes(model)
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise ModelError(f"model file {path!r} does not exist")
        with open(path, "rb") as f:
            return f.read()
    if hasattr(model, "SerializeToString"):
        return model.SerializeToString()
    raise ModelError(f"a model is a path, bytes or onnx.ModelProto, not {type(model).__name__}")


def predict(dataset, model, *, backends: list[str] | None = None,
            inputs: dict[str, str] | None = None,
            outputs: list[str] | dict[str, str] | None = None,
            batch_size: int = DEFAULT_BATCH_SIZE, concurrency: int | tuple[int, int] = 1,
            num_cpus: float = 1, batch_format: str = "numpy",
            backend_folders: list[str] | None = None, op_folders: list[str] | None = None,
            runtime_env: dict | None = None, **map_batches_args):
    """``dataset`` with the outputs of ``model`` added as columns (lazy, like every Dataset).

    The model (path, bytes or ``onnx.ModelProto``) is put in Ray's object store once; each of
    the ``concurrency`` actors (``num_cpus`` CPUs each; the cpu backend gets as many threads)
    fetches it once and loads it with ``backends``. ``inputs``, ``outputs``: as for
    :class:`Predictor`. ``backend_folders`` / ``op_folders``: local folders of native backend
    and custom-op shared objects, sent to every worker through the object store (Ray's
    ``runtime_env`` uploads local folders only for a whole job, at ``ray.init``); entry-point
    backends come from the workers' own environment. A worker that dies is
    replaced and its batches retried (``max_restarts``/``max_task_retries``, -1 by default);
    a model that cannot load on the workers fails the job with nnplug's error.
    Other keyword arguments go to ``Dataset.map_batches``.
    """
    import ray

    if not ray.is_initialized():
        ray.init()
    ref = ray.put(model_bytes(model))
    folders = None
    if backend_folders or op_folders:
        folders = ray.put(pack_folders(backend_folders, op_folders))
    env = dict(runtime_env or {})
    env_vars = env["env_vars"] = dict(env.get("env_vars") or {})
    env_vars.setdefault("NNPLUG_CPU_THREADS", str(max(1, int(num_cpus))))
    # Ray Data restarts dead actors of a pool and retries their batches by default
    # (max_restarts = max_task_retries = -1); passing them again is deprecated in Ray 2.51+.
    if "compute" not in map_batches_args:
        map_batches_args["compute"] = actor_pool(concurrency)
    return dataset.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": ref, "backends": backends, "inputs": inputs,
                               "outputs": outputs, "folders": folders},
        batch_size=batch_size, num_cpus=num_cpus,
        batch_format=batch_format, runtime_env=env, **map_batches_args)


def actor_pool(concurrency: int | tuple[int, int]):
    """Ray Data's actor pool for ``concurrency`` (a size or a (min, max) range); the
    ``concurrency=`` argument of ``map_batches`` is deprecated since Ray 2.51."""
    from ray.data import ActorPoolStrategy

    if isinstance(concurrency, tuple):
        low, high = concurrency
        return ActorPoolStrategy(min_size=low, max_size=high)
    return ActorPoolStrategy(size=concurrency)


def pack_folders(backend_folders, op_folders) -> dict[str, list[list[tuple[str, bytes]]]]:
    """The files of local native-plugin folders, to travel through the object store:
    ``{"backends": [[(relative path, bytes), ...] per folder], "ops": [...]}``."""
    packed: dict[str, list] = {"backends": [], "ops": []}
    for kind, folders in (("backends", backend_folders), ("ops", op_folders)):
        for folder in [folders] if isinstance(folders, (str, os.PathLike)) else folders or []:
            folder = os.fspath(folder)
            if not os.path.isdir(folder):
                raise InputError(f"{kind} folder {folder!r} does not exist")
            files = []
            for root, _, names in os.walk(folder):
                for name in sorted(names):
                    full = os.path.join(root, name)
                    with open(full, "rb") as f:
                        files.append((os.path.relpath(full, folder), f.read()))
            packed[kind].append(files)
    return packed
