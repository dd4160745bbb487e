"""predict(): one call for the common case, a Dataset in, the Dataset with outputs out."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

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
    and custom-op shared objects, shipped to every worker with ``runtime_env``'s working_dir;
    entry-point backends come from the workers' own environment. A worker that dies is
    replaced and its batches retried (``max_restarts``/``max_task_retries``, -1 by default);
    a model that cannot load on the workers fails the job with nnplug's error.
    Other keyword arguments go to ``Dataset.map_batches``.
    """
    import ray

    if not ray.is_initialized():
        ray.init()
    ref = ray.put(model_bytes(model))
    env, backend_path, op_path = _ship_folders(runtime_env, backend_folders, op_folders)
    env_vars = env.setdefault("env_vars", {})
    env_vars.setdefault("NNPLUG_CPU_THREADS", str(max(1, int(num_cpus))))
    map_batches_args.setdefault("max_restarts", -1)
    map_batches_args.setdefault("max_task_retries", -1)
    return dataset.map_batches(
        Predictor,
        fn_constructor_kwargs={"model": ref, "backends": backends, "inputs": inputs,
                               "outputs": outputs, "backend_path": backend_path,
                               "op_path": op_path},
        batch_size=batch_size, concurrency=concurrency, num_cpus=num_cpus,
        batch_format=batch_format, runtime_env=env, **map_batches_args)


def _ship_folders(runtime_env, backend_folders, op_folders):
    """A runtime_env whose working_dir holds copies of the native folders, and the folders'
    paths relative to it (the workers' working folder). None: the workers' own defaults."""
    env = dict(runtime_env or {})
    if not backend_folders and not op_folders:
        return env, None, None
    if "working_dir" in env:
        raise InputError("runtime_env already has a working_dir: put the native folders inside "
                         "it and name them with Predictor's backend_path/op_path instead of "
                         "backend_folders/op_folders")
    stage = tempfile.mkdtemp(prefix="nnplug-ray-native-")
    atexit.register(shutil.rmtree, stage, True)  # Ray uploads it when the job's actors start
    paths: dict[str, list[str]] = {"backends": [], "ops": []}
    for kind, folders in (("backends", backend_folders), ("ops", op_folders)):
        for i, folder in enumerate([folders] if isinstance(folders, str) else folders or []):
            if not os.path.isdir(folder):
                raise InputError(f"{kind} folder {folder!r} does not exist")
            name = f"{kind}-{i}"
            shutil.copytree(folder, os.path.join(stage, name))
            paths[kind].append(name)
    env["working_dir"] = stage
    return env, paths["backends"] or None, paths["ops"] or None
