"""The shared interval formatter: every query's rows as a struct column of its output
schema, coalesced in one pass; its state follows the schemas of the queries running.
"""

from __future__ import annotations

import json

from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sparkcq.runtime.operators.shared_output import OutputShape, aligned, row_column


def elements(engine, query: str, *columns: str) -> list[tuple]:
    """A query's elements as sorted tuples of ``columns``, ``_ts`` and ``_te``."""
    got = engine.results(query)
    return sorted(tuple(row) for row in got[[*columns, "_ts", "_te"]].values.tolist())


def test_queries_of_other_schemas_come_and_go_while_elements_are_open(engine):
    """A query of a new output schema added while another's elements are open, then
    dropped while they still are: each query's elements are its own, closed where they end.
    """
    engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY sums AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
    """)
    engine.push("s", [dict(k="a", v=1, t=1), dict(k="b", v=2, t=2)], watermark=3)
    engine.run_cycle()
    engine.execute("CREATE QUERY names AS SELECT k FROM s [RANGE 5] WHERE v > 1")
    engine.push("s", [dict(k="a", v=3, t=4)], watermark=6)
    engine.run_cycle()
    engine.push("s", [dict(k="b", v=5, t=8)], watermark=14)
    engine.run_cycle()
    # a stream's new window sees the events from its start on (b at 2 came before it)
    assert elements(engine, "names", "k") == [("a", 4, 9), ("b", 8, 13)]
    engine.drop("query", "names")
    engine.push("s", [], end=True)
    engine.run_until_idle()
    # [RANGE 10]: a's events live over [1, 11) and [4, 14), b's over [2, 12) and [8, 18)
    assert elements(engine, "sums", "k", "total") == [
        ("a", 1, 1, 4), ("a", 3, 11, 14), ("a", 4, 4, 11),
        ("b", 2, 2, 8), ("b", 5, 12, 18), ("b", 7, 8, 12)]


def test_a_state_written_as_json_text_reads_into_row_columns(spark):
    """Open layers saved while rows were JSON text (before 2026-11-29) are read into the
    struct column of their query's schema; a query no longer running loses its layers,
    and a schema no open layer has gets a column of NULLs.
    """
    kept = StructType([StructField("k", StringType()), StructField("x", DoubleType())])
    other = StructType([StructField("n", LongType())])
    base = spark.createDataFrame(
        [(1, json.dumps({"k": "a", "x": 0.5}), 1, 10), (1, json.dumps({"k": "b"}), 2, 11),
         (9, json.dumps({"k": "gone"}), 1, 12)],
        StructType([StructField("_qid", IntegerType()), StructField("_row", StringType()),
                    StructField("_layer", LongType()), StructField("_ts", LongType())]))
    shapes = [OutputShape(kept, False, {1: "q1"}), OutputShape(other, True, {2: "q2"})]
    got = aligned(base, shapes)
    assert got.columns == ["_qid", row_column(kept), row_column(other), "_layer", "_ts"]
    rows = sorted((r[0], None if r[1] is None else tuple(r[1]), r[2], r[3], r[4])
                  for r in got.collect())
    assert rows == [(1, ("a", 0.5), None, 1, 10), (1, ("b", None), None, 2, 11)]
