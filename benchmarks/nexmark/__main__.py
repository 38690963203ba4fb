"""Try NEXMark queries on sparkcq and Spark Structured Streaming over generated CSV files.

    .venv/bin/python -m benchmarks.nexmark                      # all queries, 1M events
    .venv/bin/python -m benchmarks.nexmark q0 q7 --events 200000 --files 4
    .venv/bin/python -m benchmarks.nexmark q5 q7 q8 --engines sparkcq,spark,flink

Prints events/s (after start-up) per engine and whether each output equals the expected one.
Data sets are kept under ``benchmarks/.data/nexmark-...`` and reused.
"""

from __future__ import annotations

import argparse
import os

from benchmarks.nexmark.bench import check, expected, run_query
from benchmarks.nexmark.generator import DEFAULT_RATE, Config, write_input
from benchmarks.nexmark.queries import QUERIES
from sparkcq.session import make_session

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    """Generate (or reuse) the data set, then run each query on each engine and check it."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.nexmark")
    parser.add_argument("queries", nargs="*", default=list(QUERIES))
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=None, help="files per stream (= cycles)")
    parser.add_argument("--rate", type=int, default=DEFAULT_RATE, help="events per second")
    parser.add_argument("--jitter-ms", type=int, default=0, help="out of order below this")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--engines", default="sparkcq,spark",
                        help="of sparkcq, spark, flink (q5, q7, q8; Flink's Python from "
                             "FLINK_PYTHON, default .venv-flink/bin/python)")
    args = parser.parse_args()
    files = args.files or max(4, args.events // 100_000)
    flink_python = os.environ.get("FLINK_PYTHON", os.path.join(HERE, "..", ".venv-flink",
                                                               "bin", "python"))
    cfg = Config(args.events, args.rate, args.jitter_ms, args.seed)
    spark = make_session(None, app_name="sparkcq-nexmark")
    name = f"nexmark-{cfg.events}-{files}-{cfg.rate}-{cfg.jitter_ms}-{cfg.seed}"
    streams = tuple(dict.fromkeys(s for q in args.queries for s in QUERIES[q].streams))
    inp = write_input(spark, os.path.join(HERE, ".data", name), cfg, files, streams)
    print(f"{cfg.events:,} events ({inp.seconds:,.0f} s of event time), {files} files per "
          f"stream, in {inp.path}", flush=True)
    for q in args.queries:
        want = expected(q, inp)
        for engine in args.engines.split(","):
            if engine == "flink" and not QUERIES[q].flink:
                continue
            run = run_query(spark, q, engine, inp, flink_python)
            print(f"{q} {QUERIES[q].title} on {engine}: {run.events_per_s:,.0f} events/s, "
                  f"start-up {run.startup_s:.1f} s, cycles {len(run.cycles)}; output "
                  f"{check(run, want, q)}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
