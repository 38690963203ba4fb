"""The console's snapshot of a running engine: queries with their freshness, the global plan
with sharing and cost, streams with nested schemas, and health figures; hand-computed."""

from __future__ import annotations

import pytest

from sparkcq.runtime.explain import explain_global_text
from sparkcq.server.console.history import HealthHistory, percentile, summary
from sparkcq.server.console.snapshot import attribute_tree, take_snapshot


def snapshot(engine, history):
    history.record(engine)
    return take_snapshot(engine, {}, history.recent())


def test_queries_plan_streams_and_health_of_a_running_engine(engine):
    engine.execute("""
      CREATE STREAM s (k STRING, v BIGINT, t BIGINT, pos STRUCT<x: DOUBLE, y: DOUBLE>)
        WITH (event_time='t', lateness='2');
      CREATE QUERY total AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
      CREATE QUERY many AS SELECT k, count(*) AS n FROM s [RANGE 10] GROUP BY k;
    """)
    history = HealthHistory()
    engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "b", "v": 3, "t": 4}], watermark=5)
    engine.run_cycle()
    snap = snapshot(engine, history)
    # watermark 5 accepted and processed: output final through 5, no lag
    queries = {q["name"]: q for q in snap["queries"]}
    assert set(queries) == {"total", "many"}
    assert queries["total"]["frontier"] == 5 and queries["total"]["lag"] == 0
    assert queries["total"]["streams"] == ["s"] and queries["total"]["language"] == "sql"
    assert queries["total"]["status"] == "running" and queries["total"]["reason"] is None
    # both groups opened elements in this cycle (a on [1, ..), b on [4, ..))
    assert queries["total"]["rows_last_cycle"] == 2
    # input accepted after the cycle: the query lags by what waits for the next cycle
    engine.push("s", [{"k": "a", "v": 2, "t": 8}], watermark=9)
    snap = snapshot(engine, history)
    lagging = {q["name"]: q for q in snap["queries"]}["many"]
    assert lagging["frontier"] == 5 and lagging["lag"] == 4

    # the same operators, ids and users as EXPLAIN GLOBAL
    nodes = snap["plan"]["nodes"]
    text = explain_global_text(engine.queries.plan).splitlines()
    for node in nodes:
        line = text[node["id"]]
        assert line.startswith(f"#{node['id']} {node['label']}  [{node['kind']}]")
        assert f"queries=[{', '.join(node['queries'])}]" in line
        assert f"state_rows={node['state_rows']}" in line
    [scan] = [n for n in nodes if n["op"] == "StreamScan"]
    assert scan["queries"] == ["many", "total"] and scan["refs"] == 2 and scan["inputs"] == []
    assert all(n["inputs"] for n in nodes if n is not scan)
    assert all(0 <= n["share"] for n in nodes)
    assert sum(n["share"] for n in nodes) == pytest.approx(1.0, abs=0.02)

    [stream] = snap["streams"]
    assert stream["watermark"] == 5 and stream["accepted_watermark"] == 9
    assert stream["queued_rows"] == 1 and stream["rows_in"] == 2
    assert stream["lateness"] == "2" and stream["event_time"] == "t"
    assert [f["name"] for f in stream["schema"]] == ["k", "v", "t", "pos"]
    assert stream["schema"][3]["children"] == [
        {"name": "x", "type": "double", "children": []},
        {"name": "y", "type": "double", "children": []}]

    # a late row is a dead letter; the health sample counts it
    engine.push("s", [{"k": "a", "v": 7, "t": 0}])
    engine.run_cycle()
    snap = snapshot(engine, history)
    [first, second] = snap["health"]
    assert (first["cycle"], second["cycle"]) == (0, 1)
    assert first["rows_in"] == 2 and second["dead_letters"] == {"s": 1}
    assert second["watermarks"] == {"s": 9}
    assert snap["streams"][0]["dead_letters"] == 1
    snapshot(engine, history)  # no new cycle: no new sample
    assert len(history.samples) == 2


def test_failed_queries_show_their_reason_and_language(engine):
    engine.execute("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    engine.execute("CREATE QUERY q AS SELECT k, v FROM s")
    info = engine.catalog.query("q")
    info.enter(info.status.FAILED, "cycle 3: failed: division by zero")
    [row] = take_snapshot(engine, {}, [])["queries"]
    assert row["status"] == "failed" and row["reason"] == "cycle 3: failed: division by zero"


def test_attribute_trees_follow_structs_in_arrays():
    from pyspark.sql.types import ArrayType, DoubleType, StringType, StructField, StructType

    point = StructType([StructField("x", DoubleType())])
    schema = StructType([StructField("name", StringType()),
                         StructField("path", ArrayType(point))])
    assert attribute_tree(schema) == [
        {"name": "name", "type": "string", "children": []},
        {"name": "path", "type": "array<struct<x:double>>",
         "children": [{"name": "x", "type": "double", "children": []}]}]


def test_summary_of_health_samples():
    samples = [{"cycle": i, "at": 100.0 + 0.5 * i, "seconds": s, "rows_in": 10 * i}
               for i, s in enumerate([0.1, 0.2, 0.3, 0.4, 2.0])]
    figures = summary(samples)
    assert figures["cycles_per_second"] == pytest.approx(2.0)  # 4 gaps in 2 s
    assert figures["latency_p50"] == 0.3 and figures["latency_p99"] == 2.0
    assert figures["rows_in_per_second"] == pytest.approx((10 + 20 + 30 + 40) / 2.0)
    assert percentile([], 0.5) is None and percentile([5.0], 0.99) == 5.0
    assert summary([samples[0]])["cycles_per_second"] is None


def test_health_samples_count_instances_shedding_and_checkpoints(spark, tmp_path):
    from sparkcq import Engine

    engine = Engine(spark=spark, checkpoint_dir=str(tmp_path / "checkpoints"))
    engine.execute("""
      CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
      CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
      CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE
        USING 'sparkcq.aggregates.library:Median';
      CREATE QUERY mid AS SELECT k, median(v) AS m FROM s [RANGE 20] GROUP BY k;
      CREATE QUERY j WITH (shedding='random', throttle='1', basic_windows='2') AS
        SELECT s.k AS k, s.v AS v, r.w AS w FROM s [RANGE 10] JOIN r [RANGE 5] ON s.k = r.k;
    """)
    history = HealthHistory()
    engine.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 3, "t": 4},
                      {"k": "b", "v": 2, "t": 5}], watermark=6)
    engine.push("r", [{"k": "a", "w": 10, "t": 3}], watermark=6)
    engine.run_cycle()
    snap = snapshot(engine, history)
    [sample] = snap["health"]
    assert sample["instances"] == 2  # median's groups a and b
    [(label, shed)] = sample["shedding"].items()
    assert "IntervalJoin" in label and shed["z"] == 1
    # s's a1 [1, 11) and a3 [4, 14) meet r's a10 [3, 8); nothing is shed at z = 1
    assert [side["shed"] for side in shed["inputs"]] == [0, 0]
    assert sum(side["processed"] for side in shed["inputs"]) > 0
    assert sample["checkpoint_seconds"] > 0
    assert history.last_checkpoint is not None
    assert history.last_checkpoint["seconds"] == sample["checkpoint_seconds"]
    [aggregate] = snap["aggregates"]
    assert aggregate["name"] == "median" and aggregate["signature"].startswith("median(")
    [join] = [n for n in snap["plan"]["nodes"] if n["shedding"] is not None]
    assert join["shedding"]["z"] == 1 and join["queries"] == ["j"]
    engine.stop()
