"""The published host-to-host traffic report at a fixed packet rate, with and without a
checkpoint directory: cycle latency, and what checkpointing costs per cycle.

    .venv/bin/python -m benchmarks.traffic_report --rate 50000 --cycles 40

Packets come from the generator source at ``rate`` packets per second of event time, one
second of them per cycle (``pace='fast'``, ``batch=rate``: the input a 1 s cycle interval
gives at that rate, without waiting for the wall clock); the report cuts them per minute
and joins the hosts table twice, as published (tests/runtime/test_chunks.py runs it verbatim). Each
configuration runs ``cycles`` cycles after ``warmup`` cycles in a fresh engine on one Spark
session; the figures are per cycle: wall time (p50, p90, max) and Spark jobs, and for the
checkpointed run the time spent writing the checkpoint. A cycle under 1 s keeps up with the
rate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sparkcq import Engine
from sparkcq.session import make_session

REPORT = """SELECT floor(S.t/60) AS minute, h1.host_id AS from_host, h2.host_id AS to_host, SUM(S.bytes)
FROM STREAM(packet_stream, 'CUT ON t BY 60 SECS') S, Hosts h1, Hosts h2
WHERE h1.ip = S.from_ip AND h2.ip = S.to_ip
GROUP BY minute, from_host, to_host"""  # noqa: E501
HOSTS = 200


def setup(engine: Engine, rate: int) -> None:
    engine.execute(f"""
    CREATE STREAM packet_stream (pid BIGINT, t BIGINT, from_ip STRING, to_ip STRING,
                                 bytes BIGINT)
      WITH (event_time='t', time_unit='seconds', source='generator', pace='fast',
            batch='{rate}', expr_pid='id', expr_t='cast(floor(id / {rate}) AS BIGINT)',
            expr_bytes='40 + id % 1461',
            expr_from_ip='concat("10.0.", cast(floor(rnd * {HOSTS}) AS STRING))',
            expr_to_ip='concat("10.0.", cast(id % {HOSTS} AS STRING))');
    CREATE TABLE Hosts (ip STRING, host_id STRING);
    """)
    engine.load_table("Hosts", [{"ip": f"10.0.{i}", "host_id": f"h{i % 50}"}
                                for i in range(HOSTS)])
    engine.execute(f"CREATE QUERY traffic AS {REPORT}")


def run(spark, rate: int, cycles: int, warmup: int, checkpoint: str | None) -> dict:
    engine = Engine(spark=spark, trusted=True, checkpoint_dir=checkpoint)
    setup(engine, rate)
    walls, jobs, saves, writes = [], [], [], []
    for i in range(warmup + cycles):
        began = time.perf_counter()
        report = engine.run_cycle()
        wall = time.perf_counter() - began
        if i >= warmup:
            walls.append(wall)
            jobs.append(report.jobs)
            if engine.recovery is not None:
                saves.append(engine.recovery.last_checkpoint_seconds)
                writes.append(engine.recovery.last_write_seconds)
    walls.sort()
    out = {"checkpoint": checkpoint is not None, "rate": rate, "cycles": cycles,
           "p50_s": round(statistics.median(walls), 3),
           "p90_s": round(walls[int(0.9 * (len(walls) - 1))], 3),
           "max_s": round(walls[-1], 3), "jobs_per_cycle": round(statistics.mean(jobs), 2),
           "rows": int(engine.results("traffic").shape[0])}
    if saves:
        # what a cycle spends on its checkpoint (taking it; waiting for the one before)
        out["checkpoint_p50_s"] = round(statistics.median(saves), 3)
        out["checkpoint_max_s"] = round(max(saves), 3)
        # writing it, in the background while the next cycles run
        out["checkpoint_write_p50_s"] = round(statistics.median(writes), 3)
    engine.stop()
    if engine.recovery is not None:
        out["checkpoints_failed"] = engine.recovery.failed_checkpoints
        assert not engine.recovery.failed_checkpoints, engine.recovery.last_failure
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=50_000, help="packets per second")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--out", default=None, help="write JSON under benchmarks/results")
    args = parser.parse_args()
    spark = make_session(shuffle_partitions=4)
    results = [run(spark, args.rate, args.cycles, args.warmup, None)]
    with tempfile.TemporaryDirectory() as folder:
        results.append(run(spark, args.rate, args.cycles, args.warmup, folder))
    for r in results:
        print(json.dumps(r))
    if args.out:
        path = Path(__file__).parent / "results" / f"{args.out}.json"
        path.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
