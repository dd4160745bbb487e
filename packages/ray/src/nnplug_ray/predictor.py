"""Predictor: an ONNX model on nnplug as a callable class for ``Dataset.map_batches``.

Ray Data makes one instance per actor, so the model is loaded (and its kernels compiled) once
per actor and then runs every batch that actor gets.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile

import numpy as np

import nnplug
from nnplug import InputError, ModelError

from . import batches


class Predictor:
    """Runs ``model`` on each batch and adds the model's outputs as columns.

    ``model``: a path, the model's bytes, or a Ray ``ObjectRef`` to the bytes (what
    :func:`nnplug_ray.predict` passes, so the model travels once through the object store).
    ``backends``: nnplug backend ids in preference order (default: every backend installed in
    the worker's environment). ``inputs``: ``{column: model input}`` (default: each model input
    is read from the column of the same name). ``outputs``: output names to keep, or
    ``{model output: column}`` (default: every output, in a column named like it).
    ``backend_path`` / ``op_path``: native backend and custom-op folders on the worker
    (``CreationOptions.dynamic_backends_path`` / ``custom_op_paths``; relative paths are taken
    from the worker's working folder, which is where a job's ``runtime_env`` working_dir
    lands). ``folders``: native folders packed by ``predict`` (``pack_folders``), or an
    ObjectRef to them: written to a temporary folder on the worker and used on top of those.

    Each row of an input column is one sample: an array (or a flat list) holding the model
    input's shape without its first (batch) dimension. Rows are stacked along a new first axis;
    a model whose batch dimension is fixed (say 1) runs the batch in slices of that size, the
    last one padded.

        ds.map_batches(Predictor, fn_constructor_kwargs={"model": "resnet50.onnx"},
                       compute=ray.data.ActorPoolStrategy(size=2), batch_size=32)
    """

    def __init__(self, model, *, backends: list[str] | None = None,
                 inputs: dict[str, str] | None = None,
                 outputs: list[str] | dict[str, str] | None = None,
                 backend_path: str | list[str] | None = None,
                 op_path: str | list[str] | None = None, folders=None):
        model = _resolve(model)
        self._native_root = None
        if folders is not None:
            self._native_root, backend_path, op_path = _unpack(folders, backend_path, op_path)
        self._runtime = nnplug.Runtime(nnplug.CreationOptions(
            dynamic_backends_path=backend_path, custom_op_paths=op_path))
        try:
            self._net = self._runtime.load(model, backends=backends)
        except nnplug.NnplugError as e:
            self._runtime.close()
            # say where: on a cluster, environments differ from machine to machine
            raise type(e)(f"{e} (on {socket.gethostname()}, pid {os.getpid()})") from None
        self._columns = _input_columns(self._net.inputs, inputs)
        self._outputs = _output_columns(self._net.outputs, outputs)
        self._rows_per_run = _fixed_batch(self._net.inputs)

    def __call__(self, batch):
        names = batches.column_names(batch)
        missing = [c for c in self._columns.values() if c not in names]
        if missing:
            wanted = {inp: col for inp, col in self._columns.items() if col in missing}
            raise InputError(
                f"the batch has no column {', '.join(map(repr, missing))} for model input(s) "
                f"{', '.join(map(repr, wanted))}; its columns: {', '.join(names)}. Map columns "
                f"to inputs with inputs={{'COLUMN': 'INPUT'}}")
        n = batches.num_rows(batch)
        if n == 0:
            return batch
        cols = batches.read_columns(batch, list(self._columns.values()))
        feeds = {v.name: stack_rows(cols[self._columns[v.name]], v, self._columns[v.name])
                 for v in self._net.inputs}
        results = self._run(feeds, n)
        return batches.add_columns(batch, {col: results[out] for out, col in self._outputs.items()})

    def _run(self, feeds: dict[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        step = self._rows_per_run or n
        parts: dict[str, list[np.ndarray]] = {name: [] for name in self._outputs}
        for start in range(0, n, step):
            chunk = {k: v[start:start + step] for k, v in feeds.items()}
            rows = len(next(iter(chunk.values())))
            if rows < step:  # a fixed batch dimension: pad the last slice with its last row
                chunk = {k: np.concatenate([v, np.repeat(v[-1:], step - rows, axis=0)])
                         for k, v in chunk.items()}
            out = self._net.run(chunk, list(self._outputs))
            for name, arr in out.items():
                if arr.ndim == 0 or arr.shape[0] != step:
                    raise ModelError(
                        f"output {name!r} has shape {list(arr.shape)} for a batch of {step} "
                        f"row(s): not one row per input row, so it cannot be a column; keep "
                        f"only per-row outputs with outputs=[...]")
                parts[name].append(arr[:rows])
        return {name: np.concatenate(p) for name, p in parts.items()}

    def __del__(self):
        net = getattr(self, "_net", None)
        if net is not None:
            net.close()
            self._runtime.close()
        if getattr(self, "_native_root", None):
            shutil.rmtree(self._native_root, ignore_errors=True)


def _resolve(model):
    """Bytes or a path; an ObjectRef is fetched from the object store (once, per actor)."""
    import ray

    if isinstance(model, ray.ObjectRef):
        model = ray.get(model)
    if isinstance(model, (str, os.PathLike)) and not os.path.exists(model):
        raise ModelError(f"model file {os.fspath(model)!r} does not exist on "
                         f"{socket.gethostname()}; pass the model's bytes (nnplug_ray.predict "
                         f"does) or put the file where every worker can read it")
    return model


def _unpack(folders, backend_path, op_path):
    """Write packed native folders under a fresh temporary folder; returns the search paths."""
    import ray

    if isinstance(folders, ray.ObjectRef):
        folders = ray.get(folders)
    root = tempfile.mkdtemp(prefix="nnplug-ray-native-")
    paths = {}
    for kind, given in (("backends", backend_path), ("ops", op_path)):
        dirs = [] if given is None else given.split(":") if isinstance(given, str) else list(given)
        for i, files in enumerate(folders.get(kind, [])):
            target = os.path.join(root, f"{kind}-{i}")
            for rel, data in files:
                full = os.path.join(target, rel)
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data)
            dirs.append(target)
        paths[kind] = dirs if dirs or given is not None else None
    return root, paths["backends"], paths["ops"]


def _input_columns(model_inputs, mapping) -> dict[str, str]:
    """model input name -> column name."""
    names = [v.name for v in model_inputs]
    if mapping is None:
        return {n: n for n in names}
    if not isinstance(mapping, dict):
        raise InputError(f"inputs= takes a dict of column -> model input, not "
                         f"{type(mapping).__name__}")
    unknown = [i for i in mapping.values() if i not in names]
    if unknown:
        raise InputError(f"inputs= names {', '.join(map(repr, unknown))}, which the model "
                         f"does not have; its inputs: {', '.join(names)}")
    out = {n: n for n in names}
    out.update({inp: col for col, inp in mapping.items()})
    return out


def _output_columns(model_outputs, outputs) -> dict[str, str]:
    """model output name -> column name."""
    names = [v.name for v in model_outputs]
    if outputs is None:
        return {n: n for n in names}
    mapping = dict(outputs) if isinstance(outputs, dict) else {o: o for o in outputs}
    unknown = [o for o in mapping if o not in names]
    if unknown or not mapping:
        raise InputError(f"outputs= names {', '.join(map(repr, unknown)) or 'nothing'}; the "
                         f"model's outputs: {', '.join(names)}")
    return mapping


def _fixed_batch(model_inputs) -> int | None:
    """The model's fixed batch size (first dimension), or None when it takes any."""
    fixed = {v.shape[0] for v in model_inputs if v.shape and isinstance(v.shape[0], int)}
    if len(fixed) > 1:
        raise ModelError(f"the model's inputs have different fixed batch sizes {sorted(fixed)}; "
                         f"rows cannot be split for them")
    return fixed.pop() if fixed else None


def stack_rows(column: np.ndarray, info, column_name: str) -> np.ndarray:
    """A column (one sample per row) as the array of model input ``info``: rows stacked on a
    new first axis, each reshaped to the input's shape without its batch dimension."""
    where = f"column {column_name!r} (model input {info.name!r})"
    if column.dtype == object:  # rows kept apart: lists or arrays, one per row
        try:
            column = np.stack([np.asarray(r) for r in column])
        except ValueError as e:
            raise InputError(f"{where}: its rows differ in shape ({e}); every row must hold one "
                             f"sample of shape {_fmt(info.shape[1:] if info.shape else None)}") from None
    if info.dtype is not None and column.dtype != info.dtype:
        if not np.can_cast(column.dtype, info.dtype, casting="same_kind"):
            raise InputError(f"{where}: dtype {column.dtype} cannot become the model's "
                             f"{info.dtype}; convert the column first")
        column = column.astype(info.dtype)
    if info.shape is None or len(info.shape) == 0:
        return column
    inner = info.shape[1:]
    n = column.shape[0]
    if all(isinstance(d, int) for d in inner):
        want = int(np.prod(inner, dtype=np.int64))
        if n and column[0].size != want:
            raise InputError(f"{where}: a row holds {column[0].size} value(s) (shape "
                             f"{list(column.shape[1:])}), the model wants {want} per sample "
                             f"(shape {_fmt(inner)})")
        return column.reshape((n, *inner))
    if column.ndim != len(info.shape):
        raise InputError(f"{where}: rows of shape {list(column.shape[1:])} do not fit the "
                         f"model's sample shape {_fmt(inner)}")
    return column


def _fmt(shape) -> str:
    return "unknown" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"
