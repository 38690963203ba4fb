"""NEXMark queries 0, 1, 2, 5, 7 and 8 in sparkcq SQL and in Spark Structured Streaming,
and q5, q7 and q8 in Flink SQL.

Each ``Query`` says which streams it reads, its sparkcq script (derived streams, then
``CREATE QUERY q``), its Structured Streaming counterpart (append mode, watermark 1 s, one
stateful operator), its output columns (``w`` is the window end where there is a window)
and how to compute its result independently with pandas over all generated rows.

Where sparkcq and Spark agree, and where they do not
----------------------------------------------------
- **q0, q1, q2** (pass-through, currency conversion ``price * 0.908``, selection
  ``auction % 123 = 0``): stateless on both; sparkcq emits each bid as an instant
  (``_ts`` = ``date_time``), Spark as a row. Identical rows. ``0.908 * price`` is a
  ``DECIMAL`` on both (Spark SQL's literal typing); the check compares it rounded to 3 places.
- **q5** (hot items: per hopping window of 10 s every 5 s, the auctions with the most bids):
  sparkcq's ``[RANGE 10 SECONDS SLIDE 5 SECONDS]`` snapshot at ``m`` holds the bids with
  ``date_time`` in ``(m - 10 s, m]``; Spark's ``window(date_time, '10 seconds', '5 seconds')``
  ending at ``m`` holds ``[m - 10 s, m)``. The generator puts every event 0.5 ms off the
  millisecond grid, so no bid lies on a boundary and both hold the same bids. sparkcq has no
  subqueries and no ``max`` over a ``GROUP BY`` in one SELECT, so q5 is two derived streams
  (counts per auction, then their maximum) joined on the count. Its output is taken in
  sparkcq's default **interval** form and expanded to the window ends ``m`` (multiples of
  5 s) each element covers: ``RSTREAM`` over derived streams has no slide period (the period
  comes only from a window written in the final query's FROM), so it evaluates at every
  *change* of the result and skips a slide whose top auctions and counts equal the previous
  slide's (the hot auction is the same for ~1.7 s of events, so this happens), and it stops
  at the last change, not at the last non-empty slide. The intervals carry the same
  information exactly. Spark cannot aggregate an aggregate and join it back to itself
  reliably in append mode (chained stateful operators dropped whole windows when tried), so
  its q5 counts per (window, auction) in the stream and picks each window's maximum in
  ``foreachBatch``: append mode emits all groups of a window in the batch where the
  watermark passes its end, so the per-batch maximum is the window's.
- **q7** (highest bid per tumbling 10 s window, all bids that have it): sparkcq cuts
  ``bid`` into 10 s chunks (``[CUT ON date_time BY 10 SECONDS]``, chunk ``[k*10, k*10+10)``,
  valid from its cut point ``k*10+10``), derives the chunk's ``max(price)`` and joins the
  chunk's bids to it; ``RSTREAM`` emits them at the cut point, which is Spark's window end
  with the same half-open convention. Spark keeps each window's bids in one aggregation
  (``max(price)`` and ``collect_list`` of the bids) and keeps those with the maximum: a
  stream-stream join of ``bid`` with its own aggregate was tried and lost the first window.
- **q8** (new users: persons who opened an auction in the same 10 s tumbling window): sparkcq
  joins the person chunk with the chunk's sellers (a derived stream grouping auctions by
  seller); Spark joins persons with auctions on id = seller and equal windows, then
  groups by (window, id, name) (join, then aggregation, in append mode). Spark once lost
  rows here (4,267 of 6,760 at 1M events in 10 files): its file source takes the oldest
  files first by modification time to the millisecond, the generator wrote a stream's small
  person files within one millisecond, and Spark read them out of time order and dropped
  whole windows as late. The files' times now follow their names (``order_by_name``), and
  Spark's q8 is exact.
- **Flink SQL** (q5, q7, q8; ``bench.run_flink``) is nexmark-flink's SQL written with window
  operators so its output is append-only: q5 counts per ``HOP`` window and auction and
  joins the counts with their per-window maximum (a window join); q7 joins each
  ``TUMBLE`` window's bids with the window's ``MAX(price)``; q8 joins the per-window persons
  with the per-window sellers. Flink's windows are ``[start, end)`` like Spark's; its
  rowtime has millisecond precision, so the tables read ``date_time`` truncated to the
  millisecond (the same windows: no event lies on a boundary) and emit the written time.
  Parallelism 1: one source reader of one file of the query's streams, all rows in
  event-time order (on 2 cores faster and steadier than two readers of round-robin lanes,
  ``bench.py``); q8's persons and auctions are one table with an event type and a view
  per stream, as nexmark-flink reads its one generator table (with a source per stream,
  the reader that ran ahead filled the window join's state, and q8's runs spread from 21
  to 34 s; ``bench.flink_tables``). At the end
  of input Flink's watermark passes every window. Its checkpoints go to files: in the
  JobManager's memory (Flink's default, 5 MiB at most) q8's checkpoints failed and some runs
  failed over (``benchmarks/suite/flink_job.py``).
- **Watermarks at the end of input**: sparkcq ends a bounded files stream with the watermark
  at +inf and emits every window; Spark's ``availableNow`` run stops with its watermark at
  the last event minus 1 s, so append mode never emits the windows that watermark has not
  passed. The check leaves those out for Spark and says how many.

Missing in sparkcq (found while writing these): ``SELECT DISTINCT`` and subqueries are
refused with clear errors; ``RSTREAM`` has no period over derived streams (above). (A
``GROUP BY`` without an aggregate call failed in the binder; fixed, with a test.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

WINDOW_S = 10  # NEXMark's windowSizeSec
SLIDE_S = 5  # NEXMark's windowPeriodSec (q5)
Q2_MODULUS = 123


@dataclass(frozen=True)
class Query:
    """One NEXMark query written for sparkcq and for Spark Structured Streaming."""

    name: str
    title: str
    streams: tuple[str, ...]  # the streams it reads
    sparkcq: str  # script ending in CREATE QUERY q
    columns: tuple[str, ...]  # output columns; ``w`` the window end
    expected: Callable[[dict[str, pd.DataFrame]], pd.DataFrame]  # from all rows, by pandas
    spark: Callable[[dict[str, DataFrame]], DataFrame]  # watermarked sources -> result
    # if set, ``spark`` is only the streaming part and this finishes each micro-batch
    spark_batch: Callable[[DataFrame], DataFrame] | None = None
    # 'instants' (stream output, time in its columns), 'rstream' (_ts is w), or
    # 'intervals' (expanded to the multiples of ``slide_s`` each element covers)
    form: str = "instants"
    slide_s: int = 0
    # Flink SQL: a SELECT of ``columns`` over the tables of ``bench.flink_tables`` (event time
    # ``date_time`` in milliseconds, the written time ``date_time_us``), and its sink's
    # columns; empty: not run on Flink
    flink: str = ""
    flink_sink: str = ""


def _tumble_end(ts: pd.Series, size_s: int = WINDOW_S) -> pd.Series:
    return ts.dt.floor(f"{size_s}s") + pd.Timedelta(seconds=size_s)


# -- q0, q1, q2 -----------------------------------------------------------------------------
def _q0_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    return rows["bid"][["auction", "bidder", "price", "date_time"]]


def _q1_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    b = rows["bid"]
    return b.assign(price=b["price"] * 0.908)[["auction", "bidder", "price", "date_time"]]


def _q2_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    b = rows["bid"]
    return b[b["auction"] % Q2_MODULUS == 0][["auction", "price", "date_time"]]


Q0 = Query(
    name="q0", title="pass-through", streams=("bid",),
    sparkcq="CREATE QUERY q AS SELECT auction, bidder, price, date_time FROM bid",
    columns=("auction", "bidder", "price", "date_time"),
    expected=_q0_expected,
    spark=lambda s: s["bid"].select("auction", "bidder", "price", "date_time"),
)
Q1 = Query(
    name="q1", title="currency conversion", streams=("bid",),
    sparkcq="CREATE QUERY q AS SELECT auction, bidder, 0.908 * price AS price, date_time "
            "FROM bid",
    columns=("auction", "bidder", "price", "date_time"),
    expected=_q1_expected,
    spark=lambda s: s["bid"].selectExpr("auction", "bidder", "0.908 * price AS price",
                                        "date_time"),
)
Q2 = Query(
    name="q2", title="selection", streams=("bid",),
    sparkcq=f"CREATE QUERY q AS SELECT auction, price, date_time FROM bid "
            f"WHERE auction % {Q2_MODULUS} = 0",
    columns=("auction", "price", "date_time"),
    expected=_q2_expected,
    spark=lambda s: s["bid"].where(F.col("auction") % Q2_MODULUS == 0)
    .select("auction", "price", "date_time"),
)


# -- q5 -------------------------------------------------------------------------------------
def _q5_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """Per window end m (multiple of 5 s): the auctions with the most bids in (m-10 s, m]."""
    b = rows["bid"]
    if b.empty:
        return pd.DataFrame(columns=["w", "auction", "num"])
    slide, size = pd.Timedelta(seconds=SLIDE_S), pd.Timedelta(seconds=WINDOW_S)
    frames = []
    # each bid is in the windows ending at the slide multiples in [ts, ts + size)
    first = b["date_time"].dt.ceil(f"{SLIDE_S}s")
    for k in range(WINDOW_S // SLIDE_S):
        w = first + k * slide
        inside = w - b["date_time"] < size
        frames.append(pd.DataFrame({"w": w[inside], "auction": b["auction"][inside]}))
    counts = pd.concat(frames).groupby(["w", "auction"]).size().rename("num").reset_index()
    top = counts.groupby("w")["num"].transform("max")
    return counts[counts["num"] == top][["w", "auction", "num"]]


def _q5_spark(s: dict[str, DataFrame]) -> DataFrame:
    return (s["bid"].groupBy(F.window("date_time", f"{WINDOW_S} seconds", f"{SLIDE_S} seconds"),
                             "auction")
            .agg(F.count(F.lit(1)).alias("num"))
            .select(F.col("window.end").alias("w"), "auction", "num"))


_HOP = (f"TABLE(HOP(TABLE bid, DESCRIPTOR(date_time), INTERVAL '{SLIDE_S}' SECOND, "
        f"INTERVAL '{WINDOW_S}' SECOND))")
_Q5_COUNTS = (f"SELECT window_start, window_end, auction, COUNT(*) AS num FROM {_HOP} "
              "GROUP BY window_start, window_end, auction")
# nexmark-flink's q5 (counts per window joined with their maximum), as window operators
_Q5_FLINK = f"""
    SELECT c.window_end AS w, c.auction, c.num
    FROM ({_Q5_COUNTS}) c
    JOIN (SELECT window_start, window_end, MAX(num) AS top FROM ({_Q5_COUNTS})
          GROUP BY window_start, window_end) t
    ON c.window_start = t.window_start AND c.window_end = t.window_end AND c.num = t.top
"""


def _q5_batch(batch: DataFrame) -> DataFrame:
    """The auctions with the most bids of each window completed in this micro-batch."""
    top = batch.groupBy("w").agg(F.max("num").alias("top"))
    return batch.join(top, "w").where("num = top").select("w", "auction", "num")


Q5 = Query(
    name="q5", title="hot items", streams=("bid",),
    sparkcq=f"""
        CREATE STREAM q5_counts AS SELECT auction, count(*) AS num
          FROM bid [RANGE {WINDOW_S} SECONDS SLIDE {SLIDE_S} SECONDS] GROUP BY auction;
        CREATE STREAM q5_top AS SELECT max(num) AS top FROM q5_counts;
        CREATE QUERY q AS SELECT c.auction, c.num FROM q5_counts c JOIN q5_top t
          ON c.num = t.top
    """,
    columns=("w", "auction", "num"),
    expected=_q5_expected,
    spark=_q5_spark, spark_batch=_q5_batch,
    form="intervals", slide_s=SLIDE_S,
    flink=_Q5_FLINK, flink_sink="w TIMESTAMP(3), auction BIGINT, num BIGINT",
)


# q5 as a Flink or Spark user writes it: one SELECT, the counts ranked per snapshot, every
# auction that ties for the most bids kept (RANK, not ROW_NUMBER); the same output as Q5
Q5_TOPN = replace(
    Q5, name="q5topn", title="hot items (Top-N form)",
    sparkcq=f"""
        CREATE QUERY q AS SELECT auction, num FROM (
          SELECT auction, count(*) AS num, RANK() OVER (ORDER BY count(*) DESC) AS r
          FROM bid [RANGE {WINDOW_S} SECONDS SLIDE {SLIDE_S} SECONDS] GROUP BY auction)
        WHERE r = 1
    """,
)


# -- q7 -------------------------------------------------------------------------------------
def _q7_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    b = rows["bid"].assign(w=lambda d: _tumble_end(d["date_time"]))
    top = b.groupby("w")["price"].transform("max")
    return b[b["price"] == top][["w", "auction", "bidder", "price", "date_time"]]


_TUMBLE_BID = f"TABLE(TUMBLE(TABLE bid, DESCRIPTOR(date_time), INTERVAL '{WINDOW_S}' SECOND))"
# each window's bids joined with the window's maximum price (a window join)
_Q7_FLINK = f"""
    SELECT b.window_end AS w, b.auction, b.bidder, b.price, b.date_time_us
    FROM {_TUMBLE_BID} b
    JOIN (SELECT window_start, window_end, MAX(price) AS top FROM {_TUMBLE_BID}
          GROUP BY window_start, window_end) m
    ON b.window_start = m.window_start AND b.window_end = m.window_end AND b.price = m.top
"""


def _q7_spark(s: dict[str, DataFrame]) -> DataFrame:
    bids = F.collect_list(F.struct("auction", "bidder", "price", "date_time"))
    per_window = (s["bid"].groupBy(F.window("date_time", f"{WINDOW_S} seconds"))
                  .agg(F.max("price").alias("top"), bids.alias("bids")))
    best = F.filter("bids", lambda x: x["price"] == F.col("top"))
    return (per_window.select(F.col("window.end").alias("w"), F.explode(best).alias("b"))
            .select("w", "b.auction", "b.bidder", "b.price", "b.date_time"))


Q7 = Query(
    name="q7", title="highest bid", streams=("bid",),
    sparkcq=f"""
        CREATE STREAM q7_top AS SELECT max(price) AS top
          FROM bid [CUT ON date_time BY {WINDOW_S} SECONDS];
        CREATE QUERY q AS RSTREAM SELECT b.auction, b.bidder, b.price, b.date_time
          FROM bid [CUT ON date_time BY {WINDOW_S} SECONDS] b JOIN q7_top t ON b.price = t.top
    """,
    columns=("w", "auction", "bidder", "price", "date_time"),
    expected=_q7_expected,
    spark=_q7_spark, form="rstream",
    flink=_Q7_FLINK,
    flink_sink="w TIMESTAMP(3), auction BIGINT, bidder BIGINT, price BIGINT, "
               "date_time TIMESTAMP(6)",
)


# -- q8 -------------------------------------------------------------------------------------
def _q8_expected(rows: dict[str, pd.DataFrame]) -> pd.DataFrame:
    p = rows["person"].assign(w=lambda d: _tumble_end(d["date_time"]))
    a = rows["auction"].assign(w=lambda d: _tumble_end(d["date_time"]))
    sellers = a[["w", "seller"]].drop_duplicates()
    out = p.merge(sellers, left_on=["w", "id"], right_on=["w", "seller"])
    return out[["w", "id", "name"]]


# nexmark-flink's q8: persons and sellers per tumbling window, window-joined
_Q8_FLINK = f"""
    SELECT p.window_end AS w, p.id, p.name
    FROM (SELECT window_start, window_end, id, name
          FROM TABLE(TUMBLE(TABLE person, DESCRIPTOR(date_time), INTERVAL '{WINDOW_S}' SECOND))
          GROUP BY window_start, window_end, id, name) p
    JOIN (SELECT window_start, window_end, seller
          FROM TABLE(TUMBLE(TABLE auction, DESCRIPTOR(date_time), INTERVAL '{WINDOW_S}' SECOND))
          GROUP BY window_start, window_end, seller) a
    ON p.window_start = a.window_start AND p.window_end = a.window_end AND p.id = a.seller
"""


def _q8_spark(s: dict[str, DataFrame]) -> DataFrame:
    window = F.window("date_time", f"{WINDOW_S} seconds")
    persons = s["person"].select("id", "name", window.alias("pw"))
    auctions = s["auction"].select("seller", window.alias("aw"))
    joined = persons.join(auctions, (persons["id"] == auctions["seller"])
                          & (persons["pw"] == auctions["aw"]))
    return (joined.groupBy("pw", "id", "name").agg(F.count(F.lit(1)).alias("n"))
            .select(F.col("pw.end").alias("w"), "id", "name"))


Q8 = Query(
    name="q8", title="new users", streams=("person", "auction"),
    sparkcq=f"""
        CREATE STREAM q8_sellers AS SELECT seller
          FROM auction [CUT ON date_time BY {WINDOW_S} SECONDS] GROUP BY seller;
        CREATE QUERY q AS RSTREAM SELECT p.id, p.name
          FROM person [CUT ON date_time BY {WINDOW_S} SECONDS] p JOIN q8_sellers s
          ON p.id = s.seller
    """,
    columns=("w", "id", "name"),
    expected=_q8_expected,
    spark=_q8_spark, form="rstream",
    flink=_Q8_FLINK, flink_sink="w TIMESTAMP(3), id BIGINT, name STRING",
)

QUERIES = {q.name: q for q in (Q0, Q1, Q2, Q5, Q5_TOPN, Q7, Q8)}
