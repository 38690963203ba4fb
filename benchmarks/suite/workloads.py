"""Workloads: one computation written for sparkcq, Spark Structured Streaming and Flink SQL,
with what its output rows are, so the engines can be compared row for row.

Every stream is ``(k INT, v DOUBLE, ts TIMESTAMP)`` (``data.py``). A workload's output rows
have the columns ``columns``; ``times`` are its timestamp columns. Where the engines'
semantics differ the workload says so and the check uses each engine's own expected rows:

- window bounds: no event lies on a whole second (``data.py``), so a snapshot at ``m`` of
  ``[RANGE 60 SECONDS]`` (``(m-60, m]``) holds the same events as a window ``[m-60, m)``;
- N queries sharing a window: sparkcq's queries use its default (coalesced interval) output,
  where the aggregates of queries over one window run as one operator and their outputs
  are formatted together (``RSTREAM`` outputs are formatted per query); each element
  ``[ts, te)`` is the value at the window ends ``m`` (multiples of the slide) it covers;
- per-event RANGE: sparkcq and Flink run the same ``OVER`` query, one row per event over
  ``[ts-60, ts]`` (both ends in); events of a key at one instant have one value, so the
  check keeps one row per key and instant. Spark Structured Streaming has no per-event
  RANGE aggregate.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F


@dataclass(frozen=True)
class StreamSpec:
    """One input stream of a workload: keys and seed of its events, its share of the suite's
    event count.
    """

    name: str = "events"
    keys: int = 1000
    seed: int = 7
    scale: float = 1.0
    rate: int = 1000  # events per second of event time


@dataclass(frozen=True)
class Workload:
    """One benchmark computation; every engine's output becomes ``columns`` rows.

    A workload of several queries (``queries`` > 1) has its outputs concatenated with a
    column ``q`` (the query's number) in front.
    """

    name: str
    title: str
    sparkcq: tuple[str, ...]  # CREATE QUERY bodies over the streams (one per query)
    # one streaming frame per query, from the streams' frames (and the static ``hosts``)
    spark: Callable[[dict[str, DataFrame]], list[DataFrame]] | None
    flink: tuple[str, ...]  # SELECTs over the streams' tables (one per query; none: not run)
    flink_sink: str  # the sink tables' columns
    columns: tuple[str, ...]
    expected: Callable[[dict[str, pd.DataFrame], str], pd.DataFrame]  # (events, engine)
    streams: tuple[StreamSpec, ...] = (StreamSpec(),)
    times: tuple[str, ...] = ("w",)
    table: bool = False  # reads the ``hosts(k INT, name STRING)`` table
    per_event: bool = False  # one row per event (an OVER window): checked per (k, ts)
    sparkcq_time: str = "w"  # the column sparkcq's ``_ts`` becomes
    sparkcq_slide_s: int = 0  # > 0: sparkcq's interval output, expanded to window ends
    notes: str = ""

    @property
    def queries(self) -> int:  # noqa: D102
        return len(self.sparkcq)


HOSTS_KEYS = 900  # the hosts table names keys 0..899: the join drops the others


def hosts_frame() -> pd.DataFrame:
    """The table the traffic report joins: a name for 900 of the 1000 keys."""
    return pd.DataFrame({"k": range(HOSTS_KEYS),
                         "name": [f"host-{k % 97:02d}" for k in range(HOSTS_KEYS)]})


def _watermarked(df: DataFrame) -> DataFrame:
    return df.withWatermark("ts", "1 second")


def _window_end(events: pd.DataFrame, size: str) -> pd.Series:
    return events["ts"].dt.floor(size) + pd.Timedelta(size)


# -- tumbling 10 s SUM and COUNT per key ---------------------------------------------------


def _tumble_spark(streams: dict[str, DataFrame]) -> list[DataFrame]:
    return [_watermarked(streams["events"]).groupBy(F.window("ts", "10 seconds"), "k")
            .agg(F.sum("v").alias("s"), F.count(F.lit(1)).alias("n"))
            .select(F.col("window.end").alias("w"), "k", "s", "n")]


def _tumble_expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
    ev = events["events"]
    out = ev.assign(w=_window_end(ev, "10s")).groupby(["w", "k"]).agg(
        s=("v", "sum"), n=("v", "size"))
    return out.reset_index()[["w", "k", "s", "n"]]


TUMBLE = Workload(
    name="tumble",
    title="tumbling 10 s SUM, COUNT per key",
    sparkcq=("RSTREAM SELECT k, sum(v) AS s, count(*) AS n "
             "FROM events [CUT ON ts BY 10 SECONDS] GROUP BY k",),
    spark=_tumble_spark,
    flink=("SELECT window_end, k, SUM(v), COUNT(*) FROM TABLE(TUMBLE(TABLE events, "
           "DESCRIPTOR(ts), INTERVAL '10' SECOND)) GROUP BY window_start, window_end, k",),
    flink_sink="w TIMESTAMP(3), k INT, s DOUBLE, n BIGINT",
    columns=("w", "k", "s", "n"),
    expected=_tumble_expected,
)


# an output-heavy tumble, as a new user tries it first: 1,000 keys at 100 events/s of event
# time, about one event per key and window, so as many output rows as input rows
TUMBLE_OUT = Workload(
    name="tumble-out",
    title="tumbling 10 s SUM, COUNT per key, one event per key and window (output-heavy)",
    sparkcq=TUMBLE.sparkcq,
    spark=_tumble_spark,
    flink=TUMBLE.flink,
    flink_sink=TUMBLE.flink_sink,
    columns=TUMBLE.columns,
    expected=_tumble_expected,
    streams=(StreamSpec(seed=31, rate=100),),
)


# -- sliding 60 s AVG per key --------------------------------------------------------------


def _hop_spark(slide: int) -> Callable[[dict[str, DataFrame]], list[DataFrame]]:
    def build(streams: dict[str, DataFrame]) -> list[DataFrame]:
        return [_watermarked(streams["events"])
                .groupBy(F.window("ts", "60 seconds", f"{slide} seconds"), "k")
                .agg(F.avg("v").alias("a"))
                .select(F.col("window.end").alias("w"), "k", "a")]
    return build


def _hop_expected(slide: int) -> Callable[[dict[str, pd.DataFrame], str], pd.DataFrame]:
    def expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
        ev = events["events"]
        first = _window_end(ev, f"{slide}s")  # the first window end after each event
        parts = [ev.assign(w=first + pd.Timedelta(seconds=slide * j))
                 for j in range(60 // slide)]
        out = pd.concat(parts).groupby(["w", "k"]).agg(a=("v", "mean"))
        return out.reset_index()[["w", "k", "a"]]
    return expected


def _hop(slide: int, keys: int, scale: float) -> Workload:
    suffix = "" if keys == 1000 else f"-{keys // 1000}k"
    return Workload(
        name=f"hop-{slide}s{suffix}",
        title=f"sliding 60 s / {slide} s AVG per key, {keys:,} keys",
        sparkcq=(f"RSTREAM SELECT k, avg(v) AS a FROM events "
                 f"[RANGE 60 SECONDS SLIDE {slide} SECONDS] GROUP BY k",),
        spark=_hop_spark(slide),
        flink=(f"SELECT window_end, k, AVG(v) FROM TABLE(HOP(TABLE events, DESCRIPTOR(ts), "
               f"INTERVAL '{slide}' SECOND, INTERVAL '60' SECOND)) "
               "GROUP BY window_start, window_end, k",),
        flink_sink="w TIMESTAMP(3), k INT, a DOUBLE",
        columns=("w", "k", "a"),
        expected=_hop_expected(slide),
        streams=(StreamSpec(keys=keys, seed=7 if keys == 1000 else 11, scale=scale),),
    )


# -- per-event 60 s RANGE AVG per key ------------------------------------------------------


_OVER_60S = ("OVER (PARTITION BY k ORDER BY ts RANGE BETWEEN INTERVAL '60' SECOND PRECEDING "
             "AND CURRENT ROW)")


def _over_expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
    ev = events["events"]
    per_instant = (ev.groupby(["k", "ts"]).agg(s=("v", "sum"), n=("v", "size"))
                   .reset_index().sort_values(["k", "ts"]))
    rolled = (per_instant.set_index("ts").groupby("k")[["s", "n"]]  # [ts-60, ts]
              .rolling("60s", closed="both").sum().reset_index())
    rolled["a"] = rolled["s"] / rolled["n"]
    return rolled[["k", "ts", "a"]]


OVER = Workload(
    name="over",
    title="per-event 60 s RANGE AVG per key",
    sparkcq=(f"SELECT k, ts, avg(v) {_OVER_60S} AS a FROM events",),
    spark=None,
    flink=(f"SELECT k, ts, AVG(v) {_OVER_60S} FROM events",),
    flink_sink="k INT, ts TIMESTAMP(3), a DOUBLE",
    columns=("k", "ts", "a"),
    expected=_over_expected,
    times=("ts",),
    per_event=True,
    sparkcq_time="",
    notes="Spark Structured Streaming has no per-event RANGE aggregate",
)


# -- the traffic report: tumbling per-minute aggregate joined with a table ------------------


def _report_spark(streams: dict[str, DataFrame]) -> list[DataFrame]:
    return [_watermarked(streams["events"]).join(streams["hosts"], "k")
            .groupBy(F.window("ts", "1 minute"), "k", "name")
            .agg(F.sum("v").alias("s"), F.count(F.lit(1)).alias("n"))
            .select(F.col("window.end").alias("w"), "k", "name", "s", "n")]


def _report_expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
    ev = events["events"].merge(hosts_frame(), on="k")
    out = ev.assign(w=_window_end(ev, "60s")).groupby(["w", "k", "name"]).agg(
        s=("v", "sum"), n=("v", "size"))
    return out.reset_index()[["w", "k", "name", "s", "n"]]


REPORT = Workload(
    name="report",
    title="per-minute SUM, COUNT joined with a table",
    sparkcq=("RSTREAM SELECT e.k, h.name, sum(e.v) AS s, count(*) AS n "
             "FROM events [CUT ON ts BY 1 MINUTE] AS e JOIN hosts AS h ON e.k = h.k "
             "GROUP BY e.k, h.name",),
    spark=_report_spark,
    flink=("SELECT a.w, a.k, h.name, a.s, a.n FROM (SELECT window_end AS w, k, SUM(v) AS s, "
           "COUNT(*) AS n FROM TABLE(TUMBLE(TABLE events, DESCRIPTOR(ts), "
           "INTERVAL '1' MINUTE)) GROUP BY window_start, window_end, k) AS a "
           "JOIN hosts AS h ON a.k = h.k",),
    flink_sink="w TIMESTAMP(3), k INT, name STRING, s DOUBLE, n BIGINT",
    columns=("w", "k", "name", "s", "n"),
    expected=_report_expected,
    table=True,
    notes="Flink joins the per-key window results with the table (a window TVF cannot "
          "follow a regular join: the join drops the time attribute)",
)


# -- interval join of two streams within w seconds ----------------------------------------


JOIN_CHECK_PARTS = 32  # the join's expected pairs are computed for 1/32 of the keys at a time


def window_join(seconds: int, keys: int, name: str = "join") -> Workload:
    """Two streams joined on the key over ``[RANGE seconds]`` windows on both sides:
    the pairs with ``|ta - tb| < seconds``.
    """

    def spark(streams: dict[str, DataFrame]) -> list[DataFrame]:
        a = _watermarked(streams["events"]).alias("a")
        b = _watermarked(streams["other"]).alias("b")
        cond = F.expr(f"a.k = b.k AND a.ts > b.ts - INTERVAL {seconds} SECONDS "
                      f"AND a.ts < b.ts + INTERVAL {seconds} SECONDS")
        return [a.join(b, cond).select(F.col("a.k").alias("k"), F.col("a.ts").alias("ta"),
                                       F.col("b.ts").alias("tb"), F.col("a.v").alias("va"),
                                       F.col("b.v").alias("vb"))]

    def expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
        a = events["events"].rename(columns={"ts": "ta", "v": "va"})
        b = events["other"].rename(columns={"ts": "tb", "v": "vb"})
        # by parts of the keys: one merge of all of them holds every same-key pair before
        # the time filter (225 million rows at 3M events, 21 GB)
        by_part = dict(list(b.groupby(b["k"] % JOIN_CHECK_PARTS)))
        found = []
        for part, left in a.groupby(a["k"] % JOIN_CHECK_PARTS):
            if part not in by_part:
                continue
            pairs = left.merge(by_part[part], on="k")
            close = (pairs["ta"] - pairs["tb"]).abs() < pd.Timedelta(seconds=seconds)
            found.append(pairs[close][["k", "ta", "tb", "va", "vb"]])
        columns = ["k", "ta", "tb", "va", "vb"]
        return pd.concat(found, ignore_index=True) if found else pd.DataFrame(columns=columns)

    return Workload(
        name=name,
        title=f"interval join of two streams, |ta - tb| < {seconds} s",
        sparkcq=("ISTREAM SELECT a.k, a.ts AS ta, b.ts AS tb, a.v AS va, b.v AS vb "
                 f"FROM events [RANGE {seconds} SECONDS] AS a "
                 f"JOIN other [RANGE {seconds} SECONDS] AS b ON a.k = b.k",),
        spark=spark,
        flink=("SELECT a.k, CAST(a.ts AS TIMESTAMP(3)), CAST(b.ts AS TIMESTAMP(3)), a.v, b.v "
               "FROM events a, other b WHERE a.k = b.k "
               f"AND a.ts > b.ts - INTERVAL '{seconds}' SECOND "
               f"AND a.ts < b.ts + INTERVAL '{seconds}' SECOND",),
        flink_sink="k INT, ta TIMESTAMP(3), tb TIMESTAMP(3), va DOUBLE, vb DOUBLE",
        columns=("k", "ta", "tb", "va", "vb"),
        expected=expected,
        streams=(StreamSpec(keys=keys, seed=21, scale=0.5),
                 StreamSpec(name="other", keys=keys, seed=22, scale=0.5)),
        times=("ta", "tb"),
        sparkcq_time="",
        notes=f"{keys:,} keys; each stream half the events",
    )


JOIN = window_join(5, 10_000)


# -- N queries sharing a filter and a window -----------------------------------------------

FLINK_MAX_INSERTS = 10
SHARED_AGGS = ("sum", "avg", "max", "min", "count")


def _shared_agg(i: int) -> tuple[str, str]:
    """Query i's aggregate, in sparkcq/Flink SQL and as a pandas aggregation name."""
    fn = SHARED_AGGS[i % len(SHARED_AGGS)]
    return fn, {"avg": "mean", "count": "size"}.get(fn, fn)


def _shared_value(i: int) -> str:
    return f"v * {i // len(SHARED_AGGS) + 1}"


def _shared_spark(n: int) -> Callable[[dict[str, DataFrame]], list[DataFrame]]:
    def build(streams: dict[str, DataFrame]) -> list[DataFrame]:
        out = []
        for i in range(n):
            fn, _ = _shared_agg(i)
            agg = F.expr(f"{fn}({_shared_value(i)})").cast("double").alias("x")
            out.append(_watermarked(streams["events"]).where("v > 10")
                       .groupBy(F.window("ts", "60 seconds", "10 seconds"), "k").agg(agg)
                       .select(F.lit(i).alias("q"), F.col("window.end").alias("w"), "k",
                               "x"))
        return out
    return build


def _shared_expected(n: int) -> Callable[[dict[str, pd.DataFrame], str], pd.DataFrame]:
    def expected(events: dict[str, pd.DataFrame], engine: str) -> pd.DataFrame:
        ev = events["events"]
        ev = ev[ev["v"] > 10]
        first = _window_end(ev, "10s")
        windows = pd.concat([ev.assign(w=first + pd.Timedelta(seconds=10 * j))
                             for j in range(6)])
        parts = []
        for i in range(n):
            _, how = _shared_agg(i)
            x = windows.assign(x=windows["v"] * (i // len(SHARED_AGGS) + 1))
            part = x.groupby(["w", "k"]).agg(x=("x", how)).reset_index()
            parts.append(part.assign(q=i, x=part["x"].astype("float64")))
        return pd.concat(parts)[["q", "w", "k", "x"]]
    return expected


def _shared(n: int) -> Workload:
    return Workload(
        name=f"shared-{n}",
        title=f"{n} quer{'y' if n == 1 else 'ies'} sharing a filter and a 60 s / 10 s window",
        sparkcq=tuple(f"SELECT {i} AS q, k, CAST({_shared_agg(i)[0]}"
                      f"({_shared_value(i)}) AS DOUBLE) AS x "
                      "FROM events [RANGE 60 SECONDS SLIDE 10 SECONDS] WHERE v > 10 GROUP BY k"
                      for i in range(n)),
        spark=_shared_spark(n),
        # Flink's 50-INSERT job had written nothing after 7 minutes (2026-11-23): not run
        flink=() if n > FLINK_MAX_INSERTS else tuple(
                    f"SELECT {i}, window_end, k, CAST({_shared_agg(i)[0].upper()}"
                    f"({_shared_value(i)}) AS DOUBLE) FROM TABLE(HOP(TABLE events, "
                    "DESCRIPTOR(ts), INTERVAL '10' SECOND, INTERVAL '60' SECOND)) "
                    "WHERE v > 10 GROUP BY window_start, window_end, k" for i in range(n)),
        flink_sink="q INT, w TIMESTAMP(3), k INT, x DOUBLE",
        columns=("q", "w", "k", "x"),
        expected=_shared_expected(n),
        streams=(StreamSpec(scale=0.2),),
        sparkcq_slide_s=10,
        notes="sparkcq: interval output, expanded to the window ends for the check; Spark: "
              "one streaming query per query, timed from the end of the last one's first "
              "batch (errs in Spark's favour); Flink: one job of N INSERTs"
              + ("" if n <= FLINK_MAX_INSERTS else ", not run: a 50-INSERT job wrote "
                 "nothing in 7 minutes"),
    )


WORKLOADS: dict[str, Workload] = {w.name: w for w in (
    TUMBLE, TUMBLE_OUT,
    _hop(30, 1000, 1.0), _hop(10, 1000, 1.0), _hop(1, 1000, 0.2), _hop(10, 100_000, 0.2),
    OVER, REPORT, JOIN,
    _shared(1), _shared(10), _shared(50),
)}

