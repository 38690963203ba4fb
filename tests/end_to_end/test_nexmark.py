"""NEXMark: the generator is deterministic and keeps the spec's proportions, and sparkcq's
q0, q2 and q7 equal the independently computed results on a small input.
"""

from __future__ import annotations

import csv
import os

import pytest

from benchmarks.nexmark.bench import check, expected, flink_lane, run_query
from benchmarks.nexmark.generator import Config, chunk_bounds, generate, read_stream, write_input
from benchmarks.suite.compare import normalised


def test_generator_is_deterministic(spark):
    cfg = Config(2_000, seed=3)
    a, b = generate(spark, cfg), generate(spark, cfg)
    for stream in ("person", "auction", "bid"):
        rows_a = a.stream(stream).orderBy("n").collect()
        assert rows_a == b.stream(stream).orderBy("n").collect()
    other = generate(spark, Config(2_000, seed=4)).bid.orderBy("n").collect()
    assert [r.price for r in other] != [r.price for r in a.bid.orderBy("n").collect()]


def test_generator_proportions_ids_and_times(spark):
    events = generate(spark, Config(10_000, rate=1_000))
    person, auction, bid = (events.stream(s).toPandas() for s in ("person", "auction", "bid"))
    assert (len(person), len(auction), len(bid)) == (200, 600, 9_200)  # 2 / 6 / 92 %
    assert list(person["id"]) == list(range(1000, 1200))
    assert list(auction["id"]) == list(range(1000, 1600))
    # in order by default, one event per millisecond at 1,000 events/s, 0.5 ms off the grid
    assert bid["date_time"].is_monotonic_increasing
    assert (bid["date_time"].dt.microsecond % 1000 == 500).all()
    # about half the bids go to hot auctions (multiples of 100 past the first id)
    hot = ((bid["auction"] - 1000) % 100 == 0).mean()
    assert 0.45 < hot < 0.6
    assert bid["auction"].max() <= auction["id"].max() + 10  # at most 10 auctions ahead


@pytest.fixture(scope="module")
def small_input(spark, tmp_path_factory):
    path = tmp_path_factory.mktemp("nexmark")
    return write_input(spark, str(path / "data"), Config(4_000, rate=200, jitter_ms=300), 2)


def test_files_cover_the_same_event_ranges(small_input):
    assert chunk_bounds(4_000, 2) == [0, 2_000, 4_000]
    counts = {s: len(read_stream(small_input, s)) for s in ("person", "auction", "bid")}
    assert counts == {"person": 80, "auction": 240, "bid": 3_680}


@pytest.mark.parametrize("query", ["q0", "q2", "q7"])
def test_sparkcq_equals_expected(spark, small_input, query):
    run = run_query(spark, query, "sparkcq", small_input)
    assert check(run, expected(query, small_input), query).startswith("ok")


def test_q5_in_top_n_form_gives_the_two_stream_forms_output(spark, small_input):
    """NEXMark q5 written with RANK() ... = 1 in one SELECT, beside the two derived
    streams and a join it needed before Top-N: the same records, equal to pandas'."""
    want = expected("q5", small_input)
    runs = {q: run_query(spark, q, "sparkcq", small_input) for q in ("q5", "q5topn")}
    for q, run in runs.items():
        assert check(run, want, q).startswith("ok"), q
    columns = ["w", "auction", "num"]
    got = {q: normalised(run.output, columns, ["w"]) for q, run in runs.items()
           if run.output is not None}
    assert len(got["q5"]) >= 5  # one row per window end at least
    assert got["q5"].equals(got["q5topn"])


@pytest.mark.parametrize("query", ["q0", "q5"])  # memory sink; foreachBatch finishing
def test_structured_streaming_equals_expected(spark, small_input, query):
    run = run_query(spark, query, "spark", small_input)
    assert run.events_timed > 0 and run.work is not None and run.work.tasks > 0
    assert check(run, expected(query, small_input), query).startswith("ok")


def test_flink_lane_of_two_streams_is_each_stream_in_time_order(spark, tmp_path):
    """Flink reads q8's persons and auctions from one file: every row of each stream once,
    in its written order, tagged with its event type, the two merged on event time."""
    inp = write_input(spark, str(tmp_path / "data"), Config(3_000, rate=500), 3,
                      ("person", "auction"))
    with open(os.path.join(flink_lane(inp, ("person", "auction")), "lane.csv"),
              newline="") as f:
        lane = list(csv.reader(f))
    person = [row[1:7] for row in lane if row[0] == "0"]
    auction = [row[7:] for row in lane if row[0] == "1"]
    assert all(row[7:] == [""] * 8 for row in lane if row[0] == "0")
    assert all(row[1:7] == [""] * 6 for row in lane if row[0] == "1")
    for stream, rows in (("person", person), ("auction", auction)):
        written = read_stream(inp, stream)
        assert len(rows) == len(written) and len(rows) > 0
        assert [int(row[0]) for row in rows] == list(written["id"])
    times = [row[6] if row[0] == "0" else row[11] for row in lane]
    assert times == sorted(times)
    assert {row[0] for row in lane[:10]} == {"0", "1"}  # interleaved, not one after the other
