"""``nnplug batch MODEL INPUT OUTPUT``: a model over a Parquet dataset or a folder of .npy
files on Ray, the rows with the model's outputs written to one Parquet file.

Added to the ``nnplug`` command through the core's ``nnplug.cli`` entry point group.
"""

from __future__ import annotations

import argparse
import glob
import io
import os

from nnplug import InputError, NnplugError

from .errors import nnplug_error
from .predict import DEFAULT_BATCH_SIZE, model_bytes, predict

PATH_COLUMN = "path"
"""In a folder of .npy files, the column naming each row's file."""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="nnplug batch",
        description="Run an ONNX model over a dataset on Ray and write the outputs to Parquet.")
    p.add_argument("model", help="path of an .onnx model")
    p.add_argument("input", help="a Parquet file or folder of them, or a folder of .npy files "
                                 "(one sample each, for a model with one input)")
    p.add_argument("output", help="the Parquet file to write")
    p.add_argument("--address", help="an existing Ray cluster (default: start one here)")
    p.add_argument("--backend", action="append", help="backend id, in preference order (repeatable)")
    p.add_argument("--input", dest="columns", action="append", metavar="COLUMN=INPUT",
                   help="read model input INPUT from column COLUMN (default: same names)")
    p.add_argument("--output", dest="outputs", action="append", metavar="NAME",
                   help="a model output to keep (default: all)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE)
    p.add_argument("--concurrency", type=int, default=1, help="actors, each with the model loaded")
    p.add_argument("--num-cpus", type=float, default=1, help="CPUs per actor")
    p.add_argument("--backend-folder", action="append", help="native backend folder to ship to the workers")
    p.add_argument("--op-folder", action="append", help="native custom-op folder to ship to the workers")
    p.add_argument("--keep-inputs", action="store_true", help="also write the columns fed to the model")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def model_inputs(data: bytes) -> list[str]:
    """The model's input names (initializers left out), read on the driver."""
    import onnx

    try:
        graph = onnx.load_model_from_string(data).graph
    except Exception as e:
        raise NnplugError(f"the model is not a readable ONNX file: {e}") from None
    inits = {i.name for i in graph.initializer}
    return [i.name for i in graph.input if i.name not in inits]


def read_input(path: str, names: list[str], columns: dict[str, str]):
    """(dataset, rows, columns fed to the model) for a Parquet path or a folder of .npy."""
    import ray

    npy = sorted(glob.glob(os.path.join(path, "*.npy"))) if os.path.isdir(path) else []
    if npy:
        if len(names) != 1:
            raise InputError(f"{path}: a folder of .npy files feeds a model with one input; this "
                             f"one has {len(names)} ({', '.join(names)}): use Parquet, a column "
                             f"per input")
        name = names[0]

        def decode(row):
            import numpy as np

            return {PATH_COLUMN: os.path.basename(row["path"]),
                    name: np.load(io.BytesIO(row["bytes"]), allow_pickle=False)}

        ds = ray.data.read_binary_files(npy, include_paths=True).map(decode)
        return ds, len(npy), [name]
    if not os.path.exists(path):
        raise InputError(f"input {path!r} does not exist")
    if os.path.isdir(path) and not glob.glob(os.path.join(path, "**", "*.parquet"), recursive=True):
        raise InputError(f"{path}: no .npy or .parquet files in this folder")
    ds = ray.data.read_parquet(path)
    fed = [col for col, inp in columns.items()] + [n for n in names if n not in columns.values()]
    return ds, ds.count(), fed


def write_parquet(ds, path: str, total: int, progress: bool) -> int:
    """Stream the dataset's batches into one Parquet file on the driver; returns the rows."""
    import pyarrow.parquet as pq
    from tqdm import tqdm

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.partial"
    writer = None
    rows = 0
    bar = tqdm(total=total, unit="rows", disable=not progress, desc="nnplug batch")
    try:
        for table in ds.iter_batches(batch_format="pyarrow", batch_size=None):
            if writer is None:
                writer = pq.ParquetWriter(tmp, table.schema)
            writer.write_table(table)
            rows += table.num_rows
            bar.update(table.num_rows)
    finally:
        bar.close()
        if writer is not None:
            writer.close()
    if writer is None:
        raise InputError("the input has no rows; nothing was written")
    os.replace(tmp, path)  # a failed run leaves no half-written output behind
    return rows


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    data = model_bytes(args.model)
    names = model_inputs(data)
    columns = {}
    for text in args.columns or []:
        col, sep, inp = text.partition("=")
        if not sep or not col or not inp:
            raise InputError(f"--input {text!r}: write it as COLUMN=INPUT")
        columns[col] = inp

    import ray
    from ray.data import DataContext

    ray.init(address=args.address, log_to_driver=False, configure_logging=False)
    try:
        ctx = DataContext.get_current()
        ctx.execution_options.preserve_order = True  # rows come out in the input's order
        ctx.enable_progress_bars = False  # ours counts rows
        ds, total, fed = read_input(args.input, names, columns)
        out = predict(ds, data, backends=args.backend, inputs=columns or None,
                      outputs=args.outputs, batch_size=args.batch_size,
                      concurrency=args.concurrency, num_cpus=args.num_cpus,
                      backend_folders=args.backend_folder, op_folders=args.op_folder)
        if not args.keep_inputs:
            out = out.drop_columns(fed)
        try:
            rows = write_parquet(out, args.output, total, not args.no_progress)
        except NnplugError:
            raise
        except Exception as e:
            found = nnplug_error(e)
            if found is None:
                raise
            raise found from None
        print(f"wrote {rows} rows to {args.output}")
        return 0
    finally:
        ray.shutdown()
