"""sparkcq on a standalone Spark cluster, as a user's driver program; run by test_cluster.py.

``python tests/cluster_job.py spark://HOST:PORT OUT.json CHECKPOINT_DIR``: a windowed
aggregate, a join of two windowed streams and a user aggregate created at run time, over
the input of test_semantics_examples.py; writes their results and where the work ran to
``OUT.json``. Half way, the engine is replaced by one restarted from its checkpoint in
``CHECKPOINT_DIR`` (a folder every node sees: the executors write the state there), which
finishes the run.
A separate process because a process holds one SparkContext, and the test run's is local.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
import time

import udas  # the user's aggregate module, found on the driver in this script's folder

from sparkcq import Engine

QUERIES = {
    "windowed": "SELECT k, sum(v) AS s FROM s [RANGE 10] GROUP BY k",
    "joined": "SELECT s.k AS k, s.v AS v, r.w AS w FROM s [RANGE 10] JOIN r [RANGE 5] "
              "ON s.k = r.k",
    "user_agg": "SELECT k, umin(v) AS m FROM s [RANGE 10] GROUP BY k",
}


def main(master: str, out: str, checkpoint: str) -> None:
    start = time.monotonic()
    seconds = {}  # where the time goes, for a test that must stay within its budget
    eng = Engine(master=master, allow_udf_modules=["udas"], shuffle_partitions=2,
                 checkpoint_dir=checkpoint)
    seconds["session"] = time.monotonic() - start
    sc = eng.spark.sparkContext
    deadline = time.monotonic() + 60
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 2:  # the driver and an executor
        if time.monotonic() > deadline:
            raise RuntimeError("no executor registered with the driver in 60 s")
        time.sleep(0.2)
    seconds["executor"] = time.monotonic() - start
    eng.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
    """)
    # created at run time; udas is not on the executors' path: sparkcq ships the module of
    # a user aggregate by value with the tasks that run it (runtime/functions.py)
    eng.execute("CREATE AGGREGATE umin(x BIGINT) RETURNS BIGINT USING 'udas:UMin'")
    for name, sql in QUERIES.items():
        eng.execute(f"CREATE QUERY {name} AS {sql}")
    eng.push("s", [dict(k="a", v=1, t=1), dict(k="a", v=3, t=4), dict(k="b", v=2, t=5)],
             watermark=6)
    eng.push("r", [dict(k="a", w=10, t=3)], watermark=6)
    eng.run_until_idle()  # a first cycle: state carried on the cluster into the next ones
    eng.wait_for_checkpoint()  # written in the background
    seconds["first cycles"] = time.monotonic() - start
    # a restart: a new engine on the same session resumes from the shared checkpoint (its
    # records go on into the same memory sink, so the results below are the whole run's)
    eng = Engine(spark=eng.spark, allow_udf_modules=["udas"], checkpoint_dir=checkpoint,
                 sinks={"memory": eng.sinks["memory"]})
    restored_at = eng.cycle
    eng.push("s", [dict(k="a", v=5, t=12), dict(k="b", v=7, t=13)], end=True)
    eng.push("r", [dict(k="b", w=20, t=14)], end=True)
    eng.run_until_idle()
    seconds["all cycles"] = time.monotonic() - start
    # where the executors import sparkcq from (the code under test, not another checkout),
    # and that they could not have imported the user's module by its name
    executor_sparkcq, executor_udas = sc.parallelize([0], 1).map(
        lambda _: (importlib.import_module("sparkcq").__file__,
                   importlib.util.find_spec(udas.__name__) is not None)).collect()[0]
    report = {
        "master": sc.master,
        "app_id": sc.applicationId,
        "executors": sc._jsc.sc().getExecutorMemoryStatus().size() - 1,
        "executor_sparkcq": executor_sparkcq,
        "executor_finds_udas": executor_udas,
        "cycles": eng.cycle,
        "restored_at": restored_at,
        "seconds": seconds,
        "cycle_seconds": [r.seconds for r in eng.reports],
        "logs": {name: eng.query_log(name) for name in QUERIES},  # failures say why here
        "results": {name: json.loads(eng.results(name).to_json(orient="records"))
                    for name in QUERIES},
    }
    eng.stop()
    with open(out, "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
