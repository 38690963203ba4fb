"""sparkcq on a real Spark cluster (issue 17): a standalone master and worker on localhost,
started from the pyspark wheel's own scripts (tests/cluster.py), and a driver program
(tests/cluster_job.py) whose results are checked by hand, as in test_semantics_examples.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from cluster import LocalCluster, start_local_cluster

import sparkcq
from sparkcq import Engine
from sparkcq.errors import ExecutionError

TESTS = Path(__file__).parent.parent  # the helpers beside conftest.py
# where this sparkcq is imported from; the executors get it on their Python path, standing in
# for sparkcq installed in the executors' Python on every node (as `pip install -e .` does in
# CI's .venv; here it also keeps them off any other checkout the venv points at)
SOURCE_ROOT = str(Path(sparkcq.__file__).resolve().parent.parent)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and a worker of two task slots on 127.0.0.1, stopped after the module (also
    when a test or the start fails).

    ``cluster.shared_dir`` is a folder every process of the cluster sees: where a shared
    checkpoint directory goes once the engine has one.
    """
    cluster = start_local_cluster(tmp_path_factory.mktemp("spark-cluster"), cores=2)
    try:
        yield cluster
    finally:
        cluster.stop()


def run_job(cluster: LocalCluster, out: Path, timeout: float = 300) -> dict:
    """Run tests/cluster_job.py against the cluster in its own process; its report.

    About 45 s on 2 cores busy with other Spark runs; ``timeout`` only ends a hang.
    """
    env = cluster.driver_env({"spark.executorEnv.PYTHONPATH": SOURCE_ROOT})
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (SOURCE_ROOT, os.environ.get("PYTHONPATH")) if p)
    log = out.with_suffix(".log")
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, str(TESTS / "cluster_job.py"), cluster.url,
                                 str(out), str(cluster.shared_dir / "checkpoint")],
                                stdout=f, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its session: the driver and its JVM
            proc.wait()
            code = None
    if code != 0:
        state = "timed out" if code is None else f"exited with {code}"
        pytest.fail(f"cluster job {state}:\n{log.read_text()[-4000:]}\n{cluster.logs()}")
    return json.loads(out.read_text())


def rows(records: list[dict], *cols: str) -> list[tuple]:
    """Sorted tuples of ``cols`` plus ``_ts``, ``_te``."""
    return sorted(tuple(r[c] for c in (*cols, "_ts", "_te")) for r in records)


@pytest.mark.slow
def test_queries_run_on_a_standalone_cluster(cluster, tmp_path):
    report = run_job(cluster, tmp_path / "report.json")
    print("seconds:", report["seconds"], "cycles:", report["cycle_seconds"])
    results, logs = report["results"], report["logs"]
    # it ran on the cluster: its master, one executor, launched by the worker in its work
    # folder; the executors' sparkcq is this one, and the user aggregate's module is not on
    # their path (its classes travel with the tasks)
    assert report["master"] == cluster.url
    assert report["executors"] == 1
    assert list((cluster.work_dir / report["app_id"]).glob("*/stderr"))
    assert report["executor_sparkcq"].startswith(SOURCE_ROOT)
    assert not report["executor_finds_udas"]
    assert report["cycles"] >= 2
    # the engine was restarted from the checkpoint its executors wrote in the shared folder
    assert report["restored_at"] >= 1
    assert (cluster.shared_dir / "checkpoint" / "LATEST").exists()
    # a: 1[1,11) 3[4,14) 5[12,22);  b: 2[5,15) 7[13,23)
    assert rows(results["windowed"], "k", "s") == [
        ("a", 1, 1, 4), ("a", 3, 11, 12), ("a", 4, 4, 11), ("a", 5, 14, 22), ("a", 8, 12, 14),
        ("b", 2, 5, 13), ("b", 7, 15, 23), ("b", 9, 13, 15),
    ], logs["windowed"]
    # r: a10 [3,8), b20 [14,19): each pair lives where both windows hold
    assert rows(results["joined"], "k", "v", "w") == [
        ("a", 1, 10, 3, 8), ("a", 3, 10, 4, 8), ("b", 2, 20, 14, 15), ("b", 7, 20, 14, 19),
    ], logs["joined"]
    # the minimum leaves at 11 (a's 1) and 14 (a's 3) and 15 (b's 2): umin's minus runs
    assert rows(results["user_agg"], "k", "m") == [
        ("a", 1, 1, 11), ("a", 3, 11, 14), ("a", 5, 14, 22), ("b", 2, 5, 15), ("b", 7, 15, 23),
    ], logs["user_agg"]


def test_a_second_master_in_one_process_is_refused(spark):
    # getOrCreate would hand back the local session: the engine would not run on the cluster
    with pytest.raises(ExecutionError, match=r"already runs Spark on 'local\[2\]'.*"
                                             r"'spark://127.0.0.1:7077'"):
        Engine(master="spark://127.0.0.1:7077")
