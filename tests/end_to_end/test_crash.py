"""Exactly once after crashes: a process running the traffic report into
PostgreSQL is killed with SIGKILL at random points, some of them while the sink commits a
cycle, and restarted from its checkpoint directory each time; in the end the sink's tables
hold exactly the rows the report's definition gives (computed here in plain Python from the
generator's formulas, not by another engine run), each once, and every cycle is committed
once: none lost, none repeated.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from served import short_lived_jvm

JOB = Path(__file__).parent.parent / "crash_job.py"
PACKETS = 18_000  # the job's stream: t = 0 .. 17,999 s (crash_job.PACKETS)
ROOT = Path(__file__).parent.parent.parent
# kills per run (half inside a commit); SPARKCQ_CRASH_TRIALS=20 for a longer soak. Four keep
# the suite in its budget now that the feed's crash test (test_feed_crash.py) kills too
TRIALS = int(os.environ.get("SPARKCQ_CRASH_TRIALS", "4"))


def start(folder: Path, url: str, prefix: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **short_lived_jvm()}
    return subprocess.Popen([sys.executable, str(JOB), str(folder), url, prefix],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)


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


def expected_rows() -> dict[str, list[tuple]]:
    """The rows of ``traffic``, ``packets`` and ``smooth`` (without ``_cycle``), from the job's
    definition (``crash_job.py``): packet ``id`` at t = id seconds, from 10.0.0.(id % 7) to
    10.0.0.(id * 3 % 5), 40 + id % 1461 bytes; host of 10.0.0.i is host-(i % 4); a minute's
    chunk [60 m, 60 m + 60) is valid from its cut 60 (m + 1) for one chunk.
    """
    traffic: Counter[tuple[int, str, str]] = Counter()
    for pid in range(PACKETS):
        key = (pid // 60, f"host-{pid % 7 % 4}", f"host-{pid * 3 % 5 % 4}")
        traffic[key] += 40 + pid % 1461
    # each sender's moving average of bytes (alpha 0.25, over every packet in order),
    # after each minute's chunk, at its cut
    averages: dict[str, float] = {}
    smooth = []
    for m in range(PACKETS // 60):
        samples: Counter[str] = Counter()
        for pid in range(60 * m, 60 * (m + 1)):
            ip, x = f"10.0.0.{pid % 7}", float(40 + pid % 1461)
            averages[ip] = x if ip not in averages else averages[ip] + 0.25 * (x - averages[ip])
            samples[ip] += 1
        smooth += [(ip, averages[ip], n, 60 * (m + 1), 60 * (m + 1)) for ip, n in samples.items()]
    return {
        "smooth": sorted(smooth),
        "traffic": sorted((m, a, b, total, 60 * (m + 1), 60 * (m + 2))
                          for (m, a, b), total in traffic.items()),
        "packets": [(m, 60, 60 * (m + 1), 60 * (m + 2)) for m in range(PACKETS // 60)],
    }


COLUMNS = {"traffic": "minute, from_host, to_host, bytes, _ts, _te",
           "packets": "minute, n, _ts, _te",
           "smooth": "from_ip, average, samples, _ts, _te"}


@pytest.mark.slow
def test_sigkill_at_random_points_loses_and_repeats_nothing(postgres, tmp_path):
    import psycopg

    conn = psycopg.connect(postgres.conninfo(), autocommit=True)
    prepare_hosts(conn, "crash_")
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
    expected = expected_rows()
    with conn.cursor() as cur:
        for table, columns in COLUMNS.items():
            cur.execute(f"SELECT {columns} FROM crash_{table}")
            assert sorted(cur.fetchall()) == expected[table], (table, kills)
        # one commit per cycle: none repeated, none lost, and every row's cycle committed
        sink = (folder / "ENGINE_ID").read_text().strip()  # the job's id in its commits
        cur.execute("SELECT count(*), count(DISTINCT cycle), min(cycle), max(cycle) "
                    "FROM sparkcq_commits WHERE sink_id = %s", (sink,))
        n, distinct, first, last = cur.fetchone()
        assert n == distinct == last - first + 1, (n, distinct, first, last, kills)
        for table in COLUMNS:
            cur.execute(f"SELECT count(*) FROM crash_{table} WHERE _cycle NOT IN "
                        "(SELECT cycle FROM sparkcq_commits WHERE sink_id = %s)", (sink,))
            assert cur.fetchone() == (0,), table
