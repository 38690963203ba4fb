"""The examples of docs/coming-from-flink.md and docs/coming-from-spark.md, run as the pages
write them: sparkcq's SQL from the page over the page's input gives the page's result
table; the page's Structured Streaming code, run in Spark over the same rows, gives it too.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pandas as pd
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from sparkcq import Engine

DOCS = Path(__file__).parents[2] / "docs"


def blocks(page: str, language: str) -> list[str]:
    """The fenced code blocks of ``language`` in a docs page, in order."""
    text = (DOCS / page).read_text()
    return re.findall(rf"```{language}\n(.*?)```", text, re.DOTALL)


def tables(page: str) -> list[list[list[str]]]:
    """The Markdown tables of a docs page: each a list of rows of cells, header first."""
    found: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in (DOCS / page).read_text().splitlines() + [""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not all(set(c) <= {"-"} for c in cells):
                current.append(cells)
        elif current:
            found.append(current)
            current = []
    return found


def instant(text: str) -> pd.Timestamp:
    return pd.Timestamp(text)


def utc(x: object) -> pd.Timestamp:
    at = pd.Timestamp(x)
    return at.tz_convert(None) if at.tzinfo else at


def clicks_of_flink_page() -> list[dict]:
    header, *rows = tables("coming-from-flink.md")[0]
    assert header == ["page", "ts"]
    return [{"page": page, "ts": instant(ts).to_pydatetime().replace(tzinfo=dt.UTC)}
            for page, ts in rows]


def page_result(page: str) -> list[tuple]:
    header, *rows = next(t for t in tables(page) if t[0][-1] == "clicks")
    return sorted((instant(s), instant(e), p, int(n)) for s, e, p, n in rows)


def ours(engine: Engine, script: str, rows: list[dict], watermark: dt.datetime | None,
         columns: list[str]) -> list[tuple]:
    engine.execute(script)
    if watermark is None:
        engine.push("clicks", rows)
        engine.end_input("clicks")
    else:
        engine.push("clicks", rows, watermark=watermark)
    engine.run_until_idle()
    out = engine.results("counts")
    return sorted((utc(s), utc(e), p, int(n))
                  for s, e, p, n in out[columns].itertuples(index=False, name=None))


def test_the_flink_page_gives_flinks_result(engine):
    (_flink, script) = blocks("coming-from-flink.md", "sql")
    assert "CREATE TABLE" in _flink and "CREATE STREAM" in script
    got = ours(engine, script, clicks_of_flink_page(), None,
               ["window_start", "window_end", "page", "clicks"])
    assert got == page_result("coming-from-flink.md")


def test_the_spark_page_gives_structured_streamings_result(spark, engine, tmp_path):
    rows = clicks_of_flink_page()
    schema = StructType([StructField("page", StringType()), StructField("ts", TimestampType())])
    source = tmp_path / "clicks"
    spark.createDataFrame(pd.DataFrame(rows), schema).write.parquet(str(source))
    (code,) = blocks("coming-from-spark.md", "python")
    (script,) = blocks("coming-from-spark.md", "sql")
    space = {"clicks": spark.readStream.schema(schema).parquet(str(source)), "F": F,
             "checkpoint": str(tmp_path / "checkpoint")}
    exec(code, space)  # the page's Structured Streaming query, as written
    space["query"].awaitTermination()
    theirs = spark.table("counts").toPandas()
    spark.catalog.dropTempView("counts")
    spark_rows = sorted((utc(s), utc(e), p, int(n)) for s, e, p, n in
                        theirs[["start", "end", "page", "clicks"]].itertuples(index=False,
                                                                              name=None))
    # Spark's watermark after its last batch: the latest click, with a delay of 0
    got = ours(engine, script, rows, max(r["ts"] for r in rows),
               ["start", "end", "page", "clicks"])
    assert spark_rows == page_result("coming-from-spark.md")
    assert got == spark_rows


def test_session_window_gives_structured_streamings_sessions(spark, engine, tmp_path):
    """Spark's session_window in Structured Streaming and in sparkcq, same clicks, same
    watermark: the sessions that closed (gap 5 s: each at most 5 s after the one before).
    """
    rows = clicks_of_flink_page()
    schema = StructType([StructField("page", StringType()), StructField("ts", TimestampType())])
    source = tmp_path / "clicks"
    spark.createDataFrame(pd.DataFrame(rows), schema).write.parquet(str(source))
    counts = (spark.readStream.schema(schema).parquet(str(source))
              .withWatermark("ts", "0 seconds")
              .groupBy(F.session_window("ts", "5 seconds"), "page")
              .agg(F.count(F.lit(1)).alias("clicks"))
              .select(F.col("session_window.start").alias("start"),
                      F.col("session_window.end").alias("end"), "page", "clicks"))
    query = (counts.writeStream.outputMode("append").format("memory").queryName("sessions")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    theirs = spark.table("sessions").toPandas()
    spark.catalog.dropTempView("sessions")
    spark_rows = sorted((utc(s), utc(e), p, int(n)) for s, e, p, n in
                        theirs[["start", "end", "page", "clicks"]].itertuples(index=False,
                                                                              name=None))
    script = ("CREATE STREAM clicks (page STRING, ts TIMESTAMP) WITH (event_time = 'ts');\n"
              "CREATE QUERY counts AS SELECT session_window.start, session_window.end, page, "
              "count(*) AS clicks FROM clicks GROUP BY session_window(ts, '5 seconds'), page")
    got = ours(engine, script, rows, max(r["ts"] for r in rows),
               ["start", "end", "page", "clicks"])
    # home 1 5 9 14 | 21 (open), cart 3 | 10: closed by 21 are home [1, 19), cart [3, 8),
    # cart [10, 15)
    assert [(p, n) for _, _, p, n in spark_rows] == [("home", 4), ("cart", 1), ("cart", 1)]
    assert got == spark_rows
