"""Exactly once after crashes (DESIGN 4.3, 5): a process running the traffic report into
PostgreSQL is killed with SIGKILL at random points, some of them while the sink commits a
cycle, and restarted from its checkpoint directory each time; in the end the sink's tables
hold exactly the rows of a run that was never interrupted, cycle numbers included.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

JOB = Path(__file__).parent.parent / "crash_job.py"
ROOT = Path(__file__).parent.parent.parent
# kills per run (half inside a commit); SPARKCQ_CRASH_TRIALS=20 for a longer soak. Four keep
# the suite in its budget now that the feed's crash test (test_feed_crash.py) kills too
TRIALS = int(os.environ.get("SPARKCQ_CRASH_TRIALS", "4"))


def start(folder: Path, url: str, prefix: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(JOB), str(folder), url, prefix],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)


def rows(conn, table: str) -> list[tuple]:
    with conn.cursor() as cur:
        cur.execute(f"SELECT * FROM {table}")
        return sorted(cur.fetchall(), key=repr)


def prepare_hosts(conn, prefix: str) -> None:
    with conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {prefix}hosts (ip text, host_id text)")
        cur.executemany(f"INSERT INTO {prefix}hosts VALUES (%s, %s)",
                        [(f"10.0.0.{i}", f"host-{i % 4}") for i in range(7)])


def kill_at_random(proc: subprocess.Popen[str], rng: random.Random, during_commit: bool) -> str:
    """SIGKILL ``proc``: right after it starts writing a cycle to the sink (then a few
    milliseconds later), or after a random time; returns where, or 'finished'."""
    assert proc.stdout is not None
    if during_commit:
        skip = rng.randint(0, 1)  # not always the first commit after the restart
        for line in proc.stdout:
            if line.startswith("sink: ") and "writing" in line:
                if skip == 0:
                    time.sleep(rng.uniform(0, 0.05))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    return f"during the commit of {line.split('cycle ')[1].split(':')[0]}"
                skip -= 1
            if line.strip() == "done":
                break
        proc.wait()
        return "finished"
    deadline = time.monotonic() + rng.uniform(3, 9)
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return "finished"
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return "at a random point"


@pytest.mark.slow
def test_sigkill_at_random_points_loses_and_repeats_nothing(postgres, tmp_path):
    import psycopg

    conn = psycopg.connect(postgres.conninfo(), autocommit=True)
    for prefix in ("calm_", "crash_"):
        prepare_hosts(conn, prefix)
    calm = start(tmp_path / "calm", postgres.url, "calm_")
    assert calm.wait(timeout=600) == 0

    rng = random.Random(17)
    folder = tmp_path / "crash"
    kills = []
    while True:
        proc = start(folder, postgres.url, "crash_")
        if len(kills) >= TRIALS:
            assert proc.wait(timeout=600) == 0
            break
        where = kill_at_random(proc, rng, during_commit=len(kills) % 2 == 0)
        if where == "finished":
            break
        kills.append(where)
    assert len(kills) >= TRIALS, f"the job finished after {len(kills)} kills: {kills}"
    assert sum("commit" in k for k in kills) >= TRIALS // 2
    for table in ("traffic", "packets"):
        expected = rows(conn, f"calm_{table}")
        assert expected, table
        assert rows(conn, f"crash_{table}") == expected, (table, kills)
    # one commit per cycle: none repeated, none lost
    with conn.cursor() as cur:
        cur.execute("SELECT sink_id, count(*), count(DISTINCT cycle), max(cycle) "
                    "FROM sparkcq_commits GROUP BY sink_id")
        commits = cur.fetchall()
    assert len(commits) == 2
    assert len({(n, distinct, last) for _sink, n, distinct, last in commits}) == 1
