"""The published host-to-host traffic report at a fixed packet rate, with and without a
checkpoint directory: cycle latency, and what checkpointing costs per cycle.

    .venv/bin/python -m benchmarks.traffic_report --rate 50000 --cycles 40

Packets come from the generator source at ``rate`` packets per second of event time, one
second of them per cycle (``pace='fast'``, ``batch=rate``: the input a 1 s cycle interval
gives at that rate, without waiting for the wall clock); the report cuts them per minute
and joins the hosts table twice, as published (tests/runtime/test_chunks.py runs it verbatim). Each
configuration runs ``cycles`` cycles after ``warmup`` cycles in a fresh engine on one Spark
session, ``rounds`` times, the order of the two alternating (a JVM warms up as it goes);
the figures are per cycle over every round: wall time (p50, p90, p99, max) and Spark jobs,
and for the checkpointed runs what a cycle spent taking its checkpoint and what writing it
took in the background. Run more than 60 cycles: only a cycle where a minute ends emits
rows (and joins the tables), the slowest kind. A checkpointed run ends with a restart
from its directory, which must come back at the same cycle, watermark and events held. A
cycle under 1 s keeps up with the rate. With ``--interval 1`` cycles start a second apart,
as a server's at that rate: what a background checkpoint costs a cycle that then has the
machine's idle time to write in (without, cycles follow at once and the write competes
with them for the cores).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from sparkcq import Engine
from sparkcq.model.time import TIME_MAX
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


def run(spark, rate: int, cycles: int, warmup: int, checkpoint: str | None,
        interval: float = 0.0) -> dict:
    """One engine's run; its walls and the figures above. ``interval``: a cycle starts
    this many seconds after the one before (as a server's cycle interval), not at once.
    """
    engine = Engine(spark=spark, trusted=True, checkpoint_dir=checkpoint)
    setup(engine, rate)
    walls, jobs, saves, writes = [], [], [], []
    due = time.perf_counter()
    for i in range(warmup + cycles):
        time.sleep(max(0.0, due - time.perf_counter()))  # a server's cycle interval
        began = time.perf_counter()
        due = began + interval
        report = engine.run_cycle()
        wall = time.perf_counter() - began
        if i >= warmup:
            walls.append(wall)
            jobs.append(report.jobs)
            if engine.recovery is not None:
                saves.append(engine.recovery.last_checkpoint_seconds)
                writes.append(engine.recovery.last_write_seconds)
    out: dict = {"walls": walls, "jobs": jobs, "saves": saves, "writes": writes,
                 "rows": int(engine.results("traffic").shape[0])}
    marks = engine.scans["packet_stream"].marks()
    held = ahead(engine)
    engine.stop()
    if checkpoint is not None:
        assert engine.recovery is not None
        assert not engine.recovery.failed_checkpoints, engine.recovery.last_failure
        restarted = Engine(spark=spark, trusted=True, checkpoint_dir=checkpoint)
        came_back = (restarted.cycle, restarted.scans["packet_stream"].marks(),
                     ahead(restarted))
        assert came_back == (warmup + cycles, marks, held), (came_back, marks, held)
        restarted.stop()
    return out


def ahead(engine: Engine) -> int:
    """The packets held at or after the watermark (a Spark job)."""
    scan = engine.scans["packet_stream"]
    held = scan.held_between(scan.watermark, TIME_MAX)
    return 0 if held is None else held.count()


def summary(runs: list[dict], rate: int, checkpoint: bool) -> dict:
    """The figures of a configuration's runs, pooled."""
    walls = sorted(w for r in runs for w in r["walls"])
    out = {"checkpoint": checkpoint, "rate": rate, "rounds": len(runs),
           "cycles": len(walls), "p50_s": round(statistics.median(walls), 3),
           "p90_s": round(walls[int(0.9 * (len(walls) - 1))], 3),
           "p99_s": round(walls[int(0.99 * (len(walls) - 1))], 3),
           "max_s": round(walls[-1], 3),
           "jobs_per_cycle": round(statistics.mean(j for r in runs for j in r["jobs"]), 2),
           "rows": runs[-1]["rows"]}
    saves = [x for r in runs for x in r["saves"]]
    if saves:
        # what a cycle spends on its checkpoint (taking it; waiting for the one before)
        out["checkpoint_p50_s"] = round(statistics.median(saves), 3)
        out["checkpoint_max_s"] = round(max(saves), 3)
        # writing it, in the background while the next cycles run
        out["checkpoint_write_p50_s"] = round(
            statistics.median(x for r in runs for x in r["writes"]), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=50_000, help="packets per second")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--interval", type=float, default=0.0,
                        help="seconds from a cycle's start to the next's (0: at once)")
    parser.add_argument("--out", default=None, help="write JSON under benchmarks/results")
    args = parser.parse_args()
    spark = make_session(shuffle_partitions=4)
    plain: list[dict] = []
    checkpointed: list[dict] = []
    for i in range(args.rounds):
        for with_checkpoint in ((False, True) if i % 2 == 0 else (True, False)):
            if with_checkpoint:
                with tempfile.TemporaryDirectory() as folder:
                    checkpointed.append(run(spark, args.rate, args.cycles, args.warmup,
                                            folder, args.interval))
            else:
                plain.append(run(spark, args.rate, args.cycles, args.warmup, None,
                                 args.interval))
    for kind, runs in (("plain", plain), ("checkpointed", checkpointed)):
        print(kind, "p50 per round:", [round(statistics.median(r["walls"]), 3) for r in runs])
    results = [summary(plain, args.rate, False), summary(checkpointed, args.rate, True)]
    results.append({"checkpoint_adds": round(results[1]["p50_s"] / results[0]["p50_s"] - 1, 3)})
    for r in results:
        print(json.dumps(r))
    if args.out:
        path = Path(__file__).parent / "results" / f"{args.out}.json"
        path.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
