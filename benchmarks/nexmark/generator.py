"""NEXMark events generated inside Spark, and written as time-range CSV files per stream.

Written from the benchmark's published specification (Tucker et al., "NEXMark - A Benchmark
for Queries over Data Streams", and the reference generator of Apache Beam / nexmark-flink,
whose defaults we follow):

- **Event kinds by event number** ``n``: in every block of 50 events, the first is a person,
  the next 3 are auctions, the remaining 46 are bids (2 % / 6 % / 92 %).
- **Ids from the event number**: person ``n`` of block ``e = n // 50`` has id
  ``1000 + e``; auction ``n`` has id ``1000 + 3e + (n % 50 - 1)``. A bid or an auction refers
  to the *last* person / auction already generated (``last_person``, ``last_auction``).
- **Hot items**: a bid goes with probability ``1 - 1/2`` to the hot auction
  ``(last_auction // 100) * 100``, else to a uniform auction among the last 100 in flight
  plus 10 not yet created; its bidder is with probability ``1 - 1/4`` the hot bidder
  ``(last_person // 100) * 100 + 1``, else a uniform person among the last 1,000 active plus
  10 not yet created. An auction's seller is the hot seller ``(last_person // 100) * 100``
  with probability ``1 - 1/4``, else an active person the same way.
- **Prices** are ``round(10 ** (6u) * 100)`` cents for a uniform ``u``; an auction's reserve
  is its initial bid plus another such price; its category is one of 5 (``10..14``); it
  expires a uniform time up to twice the time until 100 auctions later.
- **Event time** is ``base + floor(n * 1e6 / rate / 1000)`` milliseconds (the spec's
  ``timestampForEvent``; ``rate`` events per second, NEXMark's default 10,000), so events are
  **in order** by default. ``jitter_ms > 0`` adds a uniform whole-millisecond delay below it
  (at most 999), making the streams out of order by less than a second.
- The base time is 500 microseconds past a whole second (``START``). Every event time is
  therefore ``x.xxx5`` seconds and never lies on a window boundary (whole seconds), so window
  conventions that differ only in which end is closed (sparkcq's hopping snapshot at ``m``
  holds ``(m - w, m]``, Spark's ``window`` ending at ``m`` holds ``[m - w, m)``) hold the
  same events, and the engines' outputs compare row for row.

Pseudo-randomness is ``xxhash64(n, seed, '<purpose>')``: deterministic from the seed, the
same whichever partition computes a row, and all in Column expressions (no Python per row).
Names, e-mails and item names are simple strings picked the same way (the spec's lists of
first/last names, cities and states; random letters stand in for its random strings).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass

import pandas as pd
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.suite.data import mark_written, order_by_name, part_file

PERSON_PROPORTION, AUCTION_PROPORTION, BID_PROPORTION = 1, 3, 46
TOTAL_PROPORTION = PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION
FIRST_PERSON_ID, FIRST_AUCTION_ID, FIRST_CATEGORY_ID = 1000, 1000, 10
NUM_CATEGORIES = 5
HOT_AUCTION_RATIO, HOT_BIDDERS_RATIO, HOT_SELLERS_RATIO = 2, 4, 4  # probability 1 - 1/ratio
HOT_BATCH = 100  # hot ids are the first (seller) / second (bidder) of a batch of 100
NUM_IN_FLIGHT_AUCTIONS, NUM_ACTIVE_PEOPLE, ID_LEAD = 100, 1000, 10
DEFAULT_RATE = 10_000  # events per second (the spec's firstEventRate)
START = pd.Timestamp("2026-01-01 00:00:00.000500")  # off the whole-second grid, see above
START_MICROS = (START - pd.Timestamp("1970-01-01")) // pd.Timedelta(microseconds=1)

US_STATES = ["AZ", "CA", "ID", "OR", "WA", "WY"]
US_CITIES = ["Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland", "Bend",
             "Redmond", "Seattle", "Kent", "Cheyenne"]
FIRST_NAMES = ["Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate", "Julie", "Sarah",
               "Deiter", "Walter"]
LAST_NAMES = ["Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton", "Smith", "Jones",
              "Noris"]

PERSON_SCHEMA = ("id BIGINT, name STRING, email STRING, city STRING, state STRING, "
                 "date_time TIMESTAMP")
AUCTION_SCHEMA = ("id BIGINT, item_name STRING, initial_bid BIGINT, reserve BIGINT, "
                  "date_time TIMESTAMP, expires TIMESTAMP, seller BIGINT, category BIGINT")
BID_SCHEMA = "auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP"
SCHEMAS = {"person": PERSON_SCHEMA, "auction": AUCTION_SCHEMA, "bid": BID_SCHEMA}
STREAMS = ("person", "auction", "bid")
# written and read back with microseconds (Spark's default CSV format keeps milliseconds)
TIMESTAMP_FORMAT = "yyyy-MM-dd HH:mm:ss.SSSSSS"


@dataclass(frozen=True)
class Config:
    """What to generate: event numbers ``[0, events)``, the rate, the jitter and the seed."""

    events: int
    rate: int = DEFAULT_RATE
    jitter_ms: int = 0
    seed: int = 42

    def __post_init__(self) -> None:
        if not 0 <= self.jitter_ms < 1000:
            msg = f"jitter_ms must be in [0, 1000), got {self.jitter_ms!r}"
            raise ValueError(msg)
        if self.rate < 1 or self.events < 0:
            msg = f"need rate >= 1 and events >= 0, got rate={self.rate!r} events={self.events!r}"
            raise ValueError(msg)


@dataclass(frozen=True)
class Events:
    """The three streams of one generated range, as Spark DataFrames."""

    person: DataFrame
    auction: DataFrame
    bid: DataFrame

    def stream(self, name: str) -> DataFrame:
        """The DataFrame of stream ``name`` (person, auction or bid)."""
        return {"person": self.person, "auction": self.auction, "bid": self.bid}[name]


# -- hash-based pseudo-randomness -----------------------------------------------------------
def _hash(n: Column, seed: int, purpose: str) -> Column:
    return F.xxhash64(n, F.lit(seed), F.lit(purpose))


def _uniform(n: Column, seed: int, purpose: str) -> Column:
    """A double uniform in [0, 1): the hash's top 53 bits."""
    return F.shiftrightunsigned(_hash(n, seed, purpose), 11).cast("double") / float(2**53)


def _below(n: Column, seed: int, purpose: str, bound: Column | int) -> Column:
    """A long uniform in [0, bound) (``bound`` > 0; modulo bias negligible for small bounds)."""
    return F.pmod(_hash(n, seed, purpose), F.lit(bound) if isinstance(bound, int) else bound)


def _pick(n: Column, seed: int, purpose: str, values: list[str]) -> Column:
    return F.element_at(F.array(*[F.lit(v) for v in values]),
                        (_below(n, seed, purpose, len(values)) + 1).cast("int"))


def _letters(n: Column, seed: int, purpose: str, length: int) -> Column:
    """``length`` lower-case letters (the spec's random strings, simplified)."""
    return F.concat(*[F.chr(F.lit(97) + _below(n, seed, f"{purpose}{i}", 26))
                      for i in range(length)])


# -- the spec's id arithmetic ---------------------------------------------------------------
def _last_person(n: Column) -> Column:
    """Base-0 id of the last person generated at or before event ``n``."""
    epoch, offset = F.floor(n / TOTAL_PROPORTION), F.pmod(n, F.lit(TOTAL_PROPORTION))
    return epoch * PERSON_PROPORTION + F.least(offset, F.lit(PERSON_PROPORTION - 1))


def _last_auction(n: Column) -> Column:
    """Base-0 id of the last auction generated at or before event ``n``."""
    epoch, offset = F.floor(n / TOTAL_PROPORTION), F.pmod(n, F.lit(TOTAL_PROPORTION))
    return (F.when(offset < PERSON_PROPORTION, (epoch - 1) * AUCTION_PROPORTION
                   + (AUCTION_PROPORTION - 1))
            .when(offset < PERSON_PROPORTION + AUCTION_PROPORTION,
                  epoch * AUCTION_PROPORTION + offset - PERSON_PROPORTION)
            .otherwise(epoch * AUCTION_PROPORTION + (AUCTION_PROPORTION - 1)))


def _active_person(n: Column, seed: int, purpose: str) -> Column:
    """Base-0 id of a random active person (the last 1,000, plus 10 not yet created)."""
    people = _last_person(n) + 1
    active = F.least(people, F.lit(NUM_ACTIVE_PEOPLE))
    return people - active + _below(n, seed, purpose, active + ID_LEAD)


def _in_flight_auction(n: Column, seed: int, purpose: str) -> Column:
    """Base-0 id of a random auction in flight (the last 100, plus 10 not yet created)."""
    last = _last_auction(n)
    low = F.greatest(last - NUM_IN_FLIGHT_AUCTIONS, F.lit(0))
    return low + _below(n, seed, purpose, last - low + 1 + ID_LEAD)


def _price(n: Column, seed: int, purpose: str) -> Column:
    return F.round(F.pow(F.lit(10.0), _uniform(n, seed, purpose) * 6.0) * 100.0).cast("long")


def _micros(n: Column, cfg: Config) -> Column:
    """Event time in microseconds: the spec's millisecond timestamp plus the jitter."""
    ms = F.floor(n * (1_000_000.0 / cfg.rate) / 1000.0)
    if cfg.jitter_ms:
        ms = ms + _below(n, cfg.seed, "jitter", cfg.jitter_ms)
    return F.lit(START_MICROS) + ms * 1000


def kind_of(n: Column) -> Column:
    """'person', 'auction' or 'bid': the kind of event number ``n``."""
    offset = F.pmod(n, F.lit(TOTAL_PROPORTION))
    return (F.when(offset < PERSON_PROPORTION, "person")
            .when(offset < PERSON_PROPORTION + AUCTION_PROPORTION, "auction")
            .otherwise("bid"))


def generate(spark: SparkSession, cfg: Config, first: int = 0, last: int | None = None) -> Events:
    """The events numbered ``[first, last)`` (default: all of ``cfg``), computed by Spark.

    Each DataFrame carries, besides the stream's columns, ``n`` (the event number), so a
    writer can cut all three streams at the same event numbers.
    """
    last = cfg.events if last is None else last
    n = F.col("id")
    events = spark.range(first, last).withColumn("kind", kind_of(n))
    ts = F.timestamp_micros(_micros(n, cfg))
    s = cfg.seed
    person = events.where("kind = 'person'").select(
        (_last_person(n) + FIRST_PERSON_ID).alias("id"),
        F.concat(_pick(n, s, "first", FIRST_NAMES), F.lit(" "),
                 _pick(n, s, "last", LAST_NAMES)).alias("name"),
        F.concat(_letters(n, s, "user", 7), F.lit("@"), _letters(n, s, "host", 5),
                 F.lit(".com")).alias("email"),
        _pick(n, s, "city", US_CITIES).alias("city"),
        _pick(n, s, "state", US_STATES).alias("state"),
        ts.alias("date_time"),
        n.alias("n"),
    )
    # an auction lasts up to twice the time until NUM_IN_FLIGHT_AUCTIONS auctions later
    horizon_ms = (NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION // AUCTION_PROPORTION
                  * 1000 // cfg.rate)
    hot_seller = (_last_person(n) / HOT_BATCH).cast("long") * HOT_BATCH
    seller = F.when(_below(n, s, "hot_seller", HOT_SELLERS_RATIO) > 0, hot_seller) \
        .otherwise(_active_person(n, s, "seller"))
    initial = _price(n, s, "initial_bid")
    auction = events.where("kind = 'auction'").select(
        (_last_auction(n) + FIRST_AUCTION_ID).alias("id"),
        F.concat(F.lit("item "), _letters(n, s, "item", 6)).alias("item_name"),
        initial.alias("initial_bid"),
        (initial + _price(n, s, "reserve")).alias("reserve"),
        ts.alias("date_time"),
        F.timestamp_micros(_micros(n, cfg) + (1 + _below(n, s, "length",
                                                         max(2 * horizon_ms, 1))) * 1000)
        .alias("expires"),
        (seller + FIRST_PERSON_ID).alias("seller"),
        (_below(n, s, "category", NUM_CATEGORIES) + FIRST_CATEGORY_ID).alias("category"),
        n.alias("n"),
    )
    hot_auction = (_last_auction(n) / HOT_BATCH).cast("long") * HOT_BATCH
    hot_bidder = (_last_person(n) / HOT_BATCH).cast("long") * HOT_BATCH + 1
    bid = events.where("kind = 'bid'").select(
        (F.when(_below(n, s, "hot_auction", HOT_AUCTION_RATIO) > 0, hot_auction)
         .otherwise(_in_flight_auction(n, s, "auction")) + FIRST_AUCTION_ID).alias("auction"),
        (F.when(_below(n, s, "hot_bidder", HOT_BIDDERS_RATIO) > 0, hot_bidder)
         .otherwise(_active_person(n, s, "bidder")) + FIRST_PERSON_ID).alias("bidder"),
        _price(n, s, "price").alias("price"),
        ts.alias("date_time"),
        n.alias("n"),
    )
    return Events(person, auction, bid)


# -- files ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Input:
    """A generated data set on disk: ``<path>/<stream>/part-NNN.csv`` for each stream."""

    path: str
    events: int
    files: int
    rate: int = DEFAULT_RATE
    jitter_ms: int = 0
    seed: int = 42

    def stream_path(self, stream: str) -> str:
        """The directory of one stream's files."""
        return os.path.join(self.path, stream)

    @property
    def config(self) -> Config:  # noqa: D102
        return Config(self.events, self.rate, self.jitter_ms, self.seed)

    @property
    def seconds(self) -> float:
        """The event time the data set spans."""
        return self.events / self.rate


def chunk_bounds(events: int, files: int) -> list[int]:
    """Event numbers where file ``i`` starts (and, last, where the data ends)."""
    return [events * i // files for i in range(files + 1)]


def write_input(spark: SparkSession, path: str, cfg: Config, files: int,
                streams: tuple[str, ...] = STREAMS) -> Input:
    """Write ``cfg``'s events of ``streams`` as ``files`` CSV files per stream under ``path``
    (those not there yet).

    File ``i`` of every stream holds the events numbered ``[b_i, b_{i+1})`` (``chunk_bounds``),
    so one file per cycle from each stream reads the same time range of all three. Rows are
    in event-number order, no header, timestamps with microseconds in the session's time
    zone. A stream with no event in a range gets an empty file, so every stream has
    ``files`` files. ``path/_complete-<stream>`` marks a finished stream (``path/_complete``,
    all three), reused. A query of persons and auctions writes only those: bids are 46 of
    every 50 events. The files' modification times follow their names (``order_by_name``):
    Spark's file source takes the oldest first.
    """
    inp = Input(path, cfg.events, files, cfg.rate, cfg.jitter_ms, cfg.seed)
    os.makedirs(path, exist_ok=True)
    every = os.path.exists(os.path.join(path, "_complete"))
    # the i with chunk_bounds[i] <= n < chunk_bounds[i + 1], as arithmetic (nested CASEs
    # overflowed Spark's stack at a few hundred files)
    chunk = F.expr(f"((n + 1) * {files} - 1) div {max(cfg.events, 1)}")
    for stream in streams:
        target = inp.stream_path(stream)
        done = os.path.join(path, f"_complete-{stream}")
        if every or os.path.exists(done):
            order_by_name(target)
            continue
        shutil.rmtree(target, ignore_errors=True)
        os.makedirs(target)
        scratch = tempfile.mkdtemp(prefix=f"nexmark-{stream}-", dir=path)
        df = generate(spark, cfg).stream(stream).withColumn("_chunk", chunk)
        (df.repartition(min(files, 64), "_chunk").sortWithinPartitions("_chunk", "n").drop("n")
         .write.mode("overwrite").partitionBy("_chunk")
         .option("header", "false").option("timestampFormat", TIMESTAMP_FORMAT)
         .csv(scratch))
        for i in range(files):
            name = os.path.join(target, part_file(i, files))
            part_dir = os.path.join(scratch, f"_chunk={i}")
            parts = sorted(p for p in os.listdir(part_dir) if p.endswith(".csv")) \
                if os.path.isdir(part_dir) else []
            with open(name, "wb") as out:
                for p in parts:
                    with open(os.path.join(part_dir, p), "rb") as src:
                        shutil.copyfileobj(src, out)
        shutil.rmtree(scratch, ignore_errors=True)
        order_by_name(target)
        mark_written(done)
    return inp


def read_stream(inp: Input, stream: str) -> pd.DataFrame:
    """All rows of one stream, with pandas (for the independent expected results)."""
    names = [c.split()[0] for c in SCHEMAS[stream].split(", ")]
    times = [c.split()[0] for c in SCHEMAS[stream].split(", ") if c.endswith("TIMESTAMP")]
    folder = inp.stream_path(stream)
    frames = [pd.read_csv(os.path.join(folder, f), names=names, parse_dates=times)
              for f in sorted(os.listdir(folder)) if f.endswith(".csv")
              and os.path.getsize(os.path.join(folder, f))]
    if not frames:
        return pd.DataFrame({c: pd.Series(dtype="datetime64[ns]" if c in times else "int64")
                             for c in names})
    return pd.concat(frames, ignore_index=True)
