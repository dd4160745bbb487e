"""nnplug-ray on a real two-node Ray cluster started here (one CPU per node, so two actors of one
CPU each land one on each node): results, completeness, a killed worker, failing loads, the CLI.

The cluster is the cost (tens of seconds on a busy machine): every test shares it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile

import numpy as np
import pyarrow.parquet as pq
import pytest
import ray
from ray.cluster_utils import Cluster
from ray_models import IN_SHAPE, mlp

import nnplug
import nnplug_backend_cpu
import nnplug_ray

ROWS = 120
pytestmark = pytest.mark.timeout(300)  # a hung job fails with its stack, not at CI's limit


@pytest.fixture(scope="module")
def cluster():
    # Ray's sockets live under its temp folder: a short one (and not the shared /tmp/ray)
    tmp = tempfile.mkdtemp(prefix="nnr-", dir="/tmp")
    old = os.environ.get("RAY_TMPDIR")
    os.environ["RAY_TMPDIR"] = tmp
    c = Cluster(initialize_head=True,
                head_node_args={"num_cpus": 1, "object_store_memory": 100 << 20})
    c.add_node(num_cpus=1, object_store_memory=100 << 20)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()
        if old is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = old
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(7).standard_normal((ROWS, *IN_SHAPE)).astype(np.float32)


def dataset(x, blocks: int = 8):
    # in the object store already: no read task needs a CPU that the actors hold
    return ray.data.from_items([{"id": i, "x": x[i]} for i in range(len(x))],
                               override_num_blocks=blocks)


def in_process(model: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    """The same model on the same backend in this process, one row per run."""
    with nnplug.Runtime() as rt, rt.load(model, backends=["cpu"]) as net:
        runs = [net.run({"x": x[i:i + 1]}) for i in range(len(x))]
    return {k: np.concatenate([r[k] for r in runs]) for k in runs[0]}


def by_id(rows: list[dict]) -> dict[int, dict]:
    ids = [int(r["id"]) for r in rows]
    assert sorted(ids) == list(range(ROWS)), "every input row comes back exactly once"
    return {int(r["id"]): r for r in rows}


def assert_matches(rows: list[dict], want: dict[str, np.ndarray]) -> None:
    got = by_id(rows)
    for i in range(ROWS):
        for name in ("y", "score"):
            np.testing.assert_array_equal(got[i][name], want[name][i], err_msg=f"row {i} {name}")


def map_workers() -> list[int]:
    """Pids of the actors running Predictor (Ray names their processes after the class)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if cmd.startswith(b"ray::MapWorker(MapBatches(Predictor))"):
            pids.append(int(pid))
    return pids


def test_two_actors_on_two_nodes_equal_an_in_process_run_row_for_row(cluster, x):
    model = mlp(batch=1)  # a fixed batch dimension: batches of 16 run row by row
    rows = nnplug_ray.predict(dataset(x), model, backends=["cpu"], concurrency=2,
                              batch_size=16).take_all()
    assert set(rows[0]) == {"id", "x", "y", "score"}
    assert_matches(rows, in_process(model, x))


def test_a_killed_worker_is_replaced_and_the_output_is_still_complete(cluster, x):
    model = mlp(batch=1)
    out = nnplug_ray.predict(dataset(x, blocks=ROWS // 2), model, backends=["cpu"],
                             concurrency=2, batch_size=2)
    before = set(map_workers())  # actors of an earlier job that are still going away
    rows, killed, after_kill = [], None, 0
    for batch in out.iter_rows():
        rows.append(batch)
        if killed is None:
            pids = [p for p in map_workers() if p not in before]
            assert pids, "no Predictor actor process found"
            killed = pids[0]
            os.kill(killed, signal.SIGKILL)
        else:
            after_kill += 1
    assert after_kill > 0, "the job ended before the kill"
    assert killed not in map_workers()
    assert_matches(rows, in_process(model, x))


def test_a_model_that_cannot_load_on_the_workers_fails_the_job_with_nnplugs_error(cluster, x):
    # The workers' environment loses the cpu entry point: the backend is missing there only.
    ds = dataset(x[:8])
    with pytest.raises(Exception) as info:
        nnplug_ray.predict(ds, mlp(), backends=["cpu"], concurrency=1,
                           runtime_env={"env_vars": {"NNPLUG_DISABLE_PLUGINS": "cpu"}}).take_all()
    err = nnplug_ray.nnplug_error(info.value)
    assert isinstance(err, nnplug.UnsupportedNodeError), info.value
    assert "backend 'cpu' is not available (installed: none)" in str(err)
    # the package is installed there, its entry point disabled: the error says so (and which
    # setting did it), naming the worker
    assert "nnplug-backend-cpu is installed but its entry point is disabled" in str(err)
    assert "NNPLUG_DISABLE_PLUGINS" in str(err) and "pid " in str(err)


def test_a_bad_batch_fails_the_job_with_nnplugs_error_naming_the_column(cluster, x):
    ds = ray.data.from_items([{"image": x[i]} for i in range(4)])
    with pytest.raises(Exception) as info:
        nnplug_ray.predict(ds, mlp(), backends=["cpu"]).take_all()
    err = nnplug_ray.nnplug_error(info.value)
    assert isinstance(err, nnplug.InputError), info.value
    assert "no column 'x' for model input(s) 'x'; its columns: image" in str(err)


def test_a_native_backend_folder_is_shipped_to_the_workers(cluster, x, tmp_path):
    folder = tmp_path / "backends"
    folder.mkdir()
    shutil.copy2(nnplug_backend_cpu.library_path(), folder / nnplug_backend_cpu.LIBRARY)
    model = mlp(batch=1)
    rows = nnplug_ray.predict(dataset(x), model, backends=["cpu"], concurrency=2, batch_size=32,
                              backend_folders=[str(folder)],
                              runtime_env={"env_vars": {"NNPLUG_DISABLE_PLUGINS": "cpu"}}
                              ).take_all()
    assert_matches(rows, in_process(model, x))


# One actor: the other CPU reads the files (tasks that a second actor would starve).
def test_nnplug_batch_reads_npy_files_and_writes_parquet_in_order(cluster, x, tmp_path):
    model_path = tmp_path / "mlp.onnx"
    model_path.write_bytes(mlp(batch=1))
    folder = tmp_path / "samples"
    folder.mkdir()
    for i in range(ROWS):
        np.save(folder / f"{i:04d}.npy", x[i])
    out = tmp_path / "out.parquet"
    env = {k: v for k, v in os.environ.items() if k != "NNPLUG_DISABLE_PLUGINS"}
    r = subprocess.run([sys.executable, "-m", "nnplug", "batch", str(model_path), str(folder),
                        str(out), "--address", cluster.address, "--concurrency", "1",
                        "--backend", "cpu", "--batch-size", "16"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"wrote {ROWS} rows to {out}" in r.stdout
    assert f"{ROWS}/{ROWS}" in r.stderr  # the progress bar's last state
    table = pq.read_table(out)
    assert table.column_names == ["path", "y", "score"]
    assert table.column("path").to_pylist() == [f"{i:04d}.npy" for i in range(ROWS)]
    want = in_process(mlp(batch=1), x)
    np.testing.assert_array_equal(np.stack(table.column("y").to_numpy(zero_copy_only=False)),
                                  want["y"])
    np.testing.assert_array_equal(table.column("score").to_numpy(), want["score"])

    bad = subprocess.run([sys.executable, "-m", "nnplug", "batch", str(model_path), str(folder),
                          str(out) + "2", "--address", cluster.address, "--backend", "nosuch",
                          "--no-progress"], env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1
    assert any(line.startswith("nnplug: error: backend 'nosuch' is not available (installed: cpu)")
               for line in bad.stderr.splitlines()), bad.stderr[-3000:]
    assert not os.path.exists(str(out) + "2")
