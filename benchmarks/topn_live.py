"""Top-N queries at a fixed rate in real time: whether each cycle keeps up.

    .venv/bin/python -m benchmarks.topn_live --query range --rate 500 --cycles 60

Rows come from the generator source at ``rate`` rows per second of event time, one second
of them per cycle (``pace='fast'``, ``batch=rate``: the input a 1 s cycle interval gives at
that rate, without waiting for the wall clock), so a cycle under 1 s keeps up. Queries:

- ``range``: ``SELECT k, v, id FROM s [RANGE 5 SECONDS] ORDER BY v DESC LIMIT 3``, the
  three highest values of the last five seconds at every instant (each arrival and
  departure);
- ``q5topn``: NEXMark q5 in its Top-N form over bids ``(auction, t)``, 50 auctions live at
  a time: ``RANK() OVER (ORDER BY count(*) DESC) = 1`` per ``[RANGE 10 SECONDS SLIDE 5
  SECONDS]``.

Each run takes ``warmup`` cycles, then times ``cycles`` cycles in a fresh engine on one
Spark session, ``rounds`` times; the figures are over every timed cycle: wall p50, p99 and
max, Spark jobs per cycle, and the rows the query emitted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from sparkcq import Engine
from sparkcq.session import make_session

QUERIES = {
    "range": ("CREATE STREAM s (id BIGINT, k BIGINT, v DOUBLE, t TIMESTAMP) WITH ("
              "event_time='t', source='generator', pace='fast', rate='{rate}', "
              "batch='{rate}', expr_id='id', expr_k='id % 10', expr_v='round(rnd * 100000)')",
              "SELECT k, v, id FROM s [RANGE 5 SECONDS] ORDER BY v DESC LIMIT 3"),
    "q5topn": ("CREATE STREAM s (auction BIGINT, t TIMESTAMP) WITH (event_time='t', "
               "source='generator', pace='fast', rate='{rate}', batch='{rate}', "
               "expr_auction='floor(id / {rate}) * 10 + cast(floor(rnd * 50) AS BIGINT)')",
               "SELECT auction, num FROM (SELECT auction, count(*) AS num, RANK() OVER "
               "(ORDER BY count(*) DESC) AS r FROM s [RANGE 10 SECONDS SLIDE 5 SECONDS] "
               "GROUP BY auction) WHERE r = 1"),
}


def run(spark, query: str, rate: int, cycles: int, warmup: int) -> dict:
    """One engine's run: the timed cycles' walls and jobs, and the rows emitted."""
    engine = Engine(spark=spark)
    stream, select = QUERIES[query]
    engine.execute(stream.format(rate=rate))
    engine.execute(f"CREATE QUERY top AS {select}")
    walls, jobs = [], []
    for i in range(warmup + cycles):
        began = time.perf_counter()
        report = engine.run_cycle()
        if i >= warmup:
            walls.append(time.perf_counter() - began)
            jobs.append(report.jobs)
    rows = len(engine.results("top"))
    engine.stop()
    return {"walls": walls, "jobs": jobs, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--query", choices=sorted(QUERIES), default="range")
    parser.add_argument("--rate", type=int, default=500, help="rows per second")
    parser.add_argument("--cycles", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spark = make_session(None, app_name="sparkcq-topn-live")
    runs = [run(spark, args.query, args.rate, args.cycles, args.warmup)
            for _ in range(args.rounds)]
    walls = sorted(w for r in runs for w in r["walls"])
    print(json.dumps({
        "query": args.query, "rate": args.rate, "cycles": len(walls),
        "p50_s": round(statistics.median(walls), 3),
        "p99_s": round(walls[int(0.99 * (len(walls) - 1))], 3),
        "max_s": round(walls[-1], 3),
        "jobs_per_cycle": round(statistics.mean(j for r in runs for j in r["jobs"]), 2),
        "keeps_up": walls[int(0.99 * (len(walls) - 1))] < 1.0,
        "rows": [r["rows"] for r in runs]}))
    spark.stop()


if __name__ == "__main__":
    main()
