"""Ray Data batches in their three formats: read columns as numpy, add columns back.

A batch is a ``dict`` of numpy arrays (``batch_format="numpy"``), a ``pandas.DataFrame`` or a
``pyarrow.Table``; what comes in is what goes out, with the new columns added.
"""

from __future__ import annotations

import numpy as np

from nnplug import InputError


def kind(batch) -> str:
    if isinstance(batch, dict):
        return "numpy"
    mod = type(batch).__module__
    if mod.startswith("pandas"):
        return "pandas"
    if mod.startswith("pyarrow"):
        return "pyarrow"
    raise InputError(f"a batch of type {type(batch).__name__} is not supported; use "
                     f"batch_format='numpy', 'pandas' or 'pyarrow' in map_batches")


def column_names(batch) -> list[str]:
    k = kind(batch)
    if k == "numpy":
        return list(batch)
    if k == "pandas":
        return [str(c) for c in batch.columns]
    return list(batch.column_names)


def num_rows(batch) -> int:
    k = kind(batch)
    if k == "numpy":
        # pandas and Arrow tables hold equal columns by construction; a dict may not, and
        # running on the first column's count would drop rows silently
        lengths = {name: len(np.asarray(col)) for name, col in batch.items()}
        if len(set(lengths.values())) > 1:
            raise InputError(
                "the batch's columns have different numbers of rows ("
                + ", ".join(f"{name!r}: {n}" for name, n in lengths.items())
                + "); every column holds one value per row")
        return next(iter(lengths.values()), 0)
    return len(batch) if k == "pandas" else batch.num_rows


def read_columns(batch, names: list[str]) -> dict[str, np.ndarray]:
    """The named columns as numpy arrays: one row per element of axis 0 (an object array
    when the rows are arrays that the format keeps apart)."""
    k = kind(batch)
    if k == "numpy":
        return {n: np.asarray(batch[n]) for n in names}
    if k == "pandas":
        return {n: batch[n].to_numpy() for n in names}
    from ray.data.block import BlockAccessor

    # Ray's tensor columns (extension types) become numpy arrays here, lists object arrays
    return dict(BlockAccessor.for_block(batch.select(names)).to_batch_format("numpy"))


def add_columns(batch, columns: dict[str, np.ndarray]):
    """``batch`` with ``columns`` added (or replaced), in the batch's own format."""
    k = kind(batch)
    if k == "numpy":
        out = dict(batch)
        out.update(columns)
        return out
    if k == "pandas":
        out = batch.copy(deep=False)
        for name, arr in columns.items():
            out[name] = list(arr) if arr.ndim > 1 else arr  # Ray turns arrays into tensors
        return out
    from ray.data.block import BlockAccessor

    new = BlockAccessor.batch_to_block(dict(columns))
    out = batch
    for name in new.column_names:
        col = new.column(name)
        if name in out.column_names:
            out = out.set_column(out.column_names.index(name), name, col)
        else:
            out = out.append_column(name, col)
    return out
