"""Predictor in this process (no cluster): batch formats, column mapping, stacking rows,
splitting for fixed batch dimensions, and the errors, checked against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pandas as pd
import pyarrow as pa
import pytest
from ray.data.block import BlockAccessor
from ray_models import IN_SHAPE, mlp

import nnplug
from nnplug_ray import Predictor

ROWS = 7


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(1).standard_normal((ROWS, *IN_SHAPE)).astype(np.float32)


def reference(x: np.ndarray) -> dict[str, np.ndarray]:
    """onnxruntime on the model with the same weights and any batch size, all rows at once."""
    sess = ort.InferenceSession(mlp("N"), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {"x": x})))


def as_format(batch: dict, fmt: str):
    return BlockAccessor.for_block(BlockAccessor.batch_to_block(batch)).to_batch_format(fmt)


@pytest.mark.parametrize("fmt", ["numpy", "pandas", "pyarrow"])
@pytest.mark.parametrize("batch_dim", ["N", 1, 3])  # any, fixed 1, fixed 3 (7 rows: padded)
def test_every_batch_format_gets_the_outputs_as_columns(x, fmt, batch_dim):
    model = mlp(batch_dim)
    want = reference(x)
    batch = as_format({"id": np.arange(ROWS), "x": x}, fmt)
    out = Predictor(model, backends=["cpu"])(batch)
    assert type(out) is type(batch)
    got = as_format(out, "numpy") if fmt != "numpy" else out
    assert list(got) == ["id", "x", "y", "score"]
    np.testing.assert_array_equal(got["id"], np.arange(ROWS))
    for name in ("y", "score"):
        assert got[name].shape == want[name].shape
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6)


def test_rows_given_as_flat_lists_of_doubles_are_stacked_into_the_input_shape(x):
    model = mlp()
    df = pd.DataFrame({"pixels": [row.reshape(-1).astype(np.float64).tolist() for row in x]})
    out = Predictor(model, inputs={"pixels": "x"}, outputs={"score": "s"})(df)
    assert list(out.columns) == ["pixels", "s"]
    np.testing.assert_allclose(np.asarray(out["s"].tolist()), reference(x)["score"],
                               rtol=1e-5, atol=1e-6)


def test_a_pyarrow_list_column_feeds_the_model_too(x):
    table = pa.table({"x": pa.array([row.reshape(-1).tolist() for row in x],
                                    pa.list_(pa.float32()))})
    out = Predictor(mlp(1), outputs=["score"])(table)
    np.testing.assert_allclose(out.column("score").to_numpy(), reference(x)["score"],
                               rtol=1e-5, atol=1e-6)


def test_a_missing_column_names_the_columns_and_the_mapping_to_use(x):
    with pytest.raises(nnplug.InputError, match=r"no column 'x' for model input\(s\) 'x'; its "
                                                r"columns: image.*inputs=\{'COLUMN': 'INPUT'\}"):
        Predictor(mlp())({"image": x})


def test_rows_of_the_wrong_size_or_dtype_say_what_the_model_wants(x):
    p = Predictor(mlp())
    with pytest.raises(nnplug.InputError, match=r"column 'x' .*holds 15 value.*wants 16"):
        p({"x": x.reshape(ROWS, -1)[:, :15]})
    with pytest.raises(nnplug.InputError, match=r"dtype complex64 cannot become.*float32"):
        p({"x": x.astype(np.complex64)})
    with pytest.raises(nnplug.InputError, match="rows differ in shape"):
        p({"x": np.array([np.zeros(16), np.zeros(3)], dtype=object)})


def test_a_dict_batch_with_columns_of_different_lengths_is_refused_not_truncated(x):
    with pytest.raises(nnplug.InputError, match=r"different numbers of rows \('id': 3, 'x': 7\)"):
        Predictor(mlp())({"id": np.arange(3), "x": x})


def test_mappings_that_name_no_such_input_or_output_are_refused():
    with pytest.raises(nnplug.InputError, match=r"'image', which the model does not have; its "
                                                r"inputs: x"):
        Predictor(mlp(), inputs={"col": "image"})
    with pytest.raises(nnplug.InputError, match=r"outputs= names 'prob'; the model's outputs: y, "
                                                r"score"):
        Predictor(mlp(), outputs=["prob"])


def test_a_backend_missing_on_the_worker_is_nnplugs_error_saying_where():
    with pytest.raises(nnplug.UnsupportedNodeError,
                       match=r"backend 'nosuch' is not available \(installed: .*\);.* \(on .*, pid "):
        Predictor(mlp(), backends=["nosuch"])
    with pytest.raises(nnplug.ModelError, match="does not exist"):
        Predictor("/no/such/model.onnx")
