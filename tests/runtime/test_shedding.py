"""A windowed stream join that sheds work (``docs/shedding.md``).

Hand-computed: at z = 1 it gives every pair. On generated input (pairs computed here in
plain Python, not by the engine): at a fixed z every record it emits is a true pair with
its exact interval (so each pair it starts it also ends, in a later cycle), and the share
of the pairs it emits is z. Bad options are refused with the place underlined.
"""

from __future__ import annotations

import random
import re
from collections import Counter

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.errors import AnalysisError
from sparkcq.model.clock import ManualClock
from sparkcq.runtime.operators.shedding import work_per_bucket
from sparkcq.testing import CollectingSink, Lag, correlated_streams

JOIN = ("SELECT s.k AS k, s.v AS v, r.w AS w FROM s [RANGE 10] JOIN r [RANGE 5] "
        "ON s.k = r.k")
STREAMS = """
    CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
    CREATE STREAM r (k STRING, w BIGINT, t BIGINT) WITH (event_time='t');
"""


def records(frame: pd.DataFrame) -> list[tuple]:
    """(k, v, w, from, to) of each record, sorted; an open end is None."""
    out = [(k, int(v), int(w), int(ts), None if pd.isna(te) else int(te))
           for k, v, w, ts, te in frame[["k", "v", "w", "_ts", "_te"]].itertuples(index=False)]
    return sorted(out, key=repr)


def test_at_z_one_every_pair_is_joined(spark):
    """The input of docs/semantics.md's join example; a z of 1 sheds nothing."""
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    eng.execute(f"CREATE QUERY j WITH (shedding='random', throttle='1', basic_windows='2') "
                f"AS {JOIN}")
    eng.push("s", [dict(k="a", v=1, t=1), dict(k="a", v=3, t=4), dict(k="b", v=2, t=5)],
             watermark=6)
    eng.push("r", [dict(k="a", w=10, t=3)], watermark=6)
    eng.push("s", [dict(k="a", v=5, t=12), dict(k="b", v=7, t=13)], end=True)
    eng.push("r", [dict(k="b", w=20, t=14)], end=True)
    eng.run_until_idle()
    # r: a10 lives [3, 8), b20 [14, 19); s: a1 [1, 11), a3 [4, 14), b2 [5, 15), b7 [13, 23)
    assert records(eng.results("j")) == sorted([
        ("a", 1, 10, 3, 8), ("a", 3, 10, 4, 8), ("b", 2, 20, 14, 15), ("b", 7, 20, 14, 19),
    ], key=repr)
    [report] = eng.metrics()["shedding"].values()
    assert report["z"] == 1
    assert all(side["shed"] == 0 and side["processed"] > 0 for side in report["inputs"])
    line = next(x for x in eng.explain_global().splitlines() if "IntervalJoin" in x)
    assert "SHEDDING random (2 sub-windows, z=1)" in line
    assert "shedding z=1.00 budget=2s: left met" in line and "skipped 0; right met" in line


WINDOW, CYCLE, CYCLES, KEYS = 60, 120, 6, 8


def generated(seed: int) -> tuple[list[list[dict]], list[list[dict]], dict[tuple, tuple]]:
    """Two streams of uncorrelated events, cycle by cycle, and every pair of their join
    (key, v, w) -> its interval, computed here.
    """
    rng = random.Random(seed)
    s_cycles: list[list[dict]] = [[] for _ in range(CYCLES)]
    r_cycles: list[list[dict]] = [[] for _ in range(CYCLES)]
    for i in range(1200):
        t = rng.randrange(CYCLES * CYCLE)
        s_cycles[t // CYCLE].append(dict(k=f"k{rng.randrange(KEYS)}", v=i, t=t))
        t = rng.randrange(CYCLES * CYCLE)
        r_cycles[t // CYCLE].append(dict(k=f"k{rng.randrange(KEYS)}", w=10_000 + i, t=t))
    pairs = {}
    for a in (e for c in s_cycles for e in c):
        for b in (e for c in r_cycles for e in c):
            start, end = max(a["t"], b["t"]), min(a["t"], b["t"]) + WINDOW
            if a["k"] == b["k"] and start < end:
                pairs[(a["k"], a["v"], b["w"])] = (start, end)
    return s_cycles, r_cycles, pairs


def test_at_a_fixed_share_only_true_pairs_that_share_of_them(spark):
    """Random and adaptive shedding side by side (two joins, one engine) at z = 0.3 on
    uncorrelated input: every record a pair of the join with its interval, 30% of them.
    """
    z = 0.3
    s_cycles, r_cycles, pairs = generated(seed=7)
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    for mode in ("random", "adaptive"):
        eng.execute(f"CREATE QUERY j_{mode} WITH (shedding='{mode}', throttle='{z}', "
                    f"basic_windows='10') AS SELECT s.k AS k, s.v AS v, r.w AS w "
                    f"FROM s [RANGE {WINDOW}] JOIN r [RANGE {WINDOW}] ON s.k = r.k")
    for c in range(CYCLES):
        last = c == CYCLES - 1
        eng.push("s", s_cycles[c], watermark=(c + 1) * CYCLE, end=last)
        eng.push("r", r_cycles[c], watermark=(c + 1) * CYCLE, end=last)
        eng.run_cycle()
    eng.run_until_idle()
    reports = eng.metrics()["shedding"]
    for mode in ("random", "adaptive"):
        got = records(eng.results(f"j_{mode}"))
        assert len({g[:3] for g in got}) == len(got)  # each pair once
        wrong = [g for g in got if pairs.get(g[:3]) != g[3:]]
        assert not wrong, f"{mode}: not pairs of the join, or not with their interval: " \
            f"{wrong[:5]}"
        assert len(got) / len(pairs) == pytest.approx(z, rel=0.05), (mode, len(got),
                                                                      len(pairs))
        [report] = [r for label, r in reports.items() if f"SHEDDING {mode}" in label]
        processed = sum(side["processed"] for side in report["inputs"])
        shed = sum(side["shed"] for side in report["inputs"])
        assert processed / (processed + shed) == pytest.approx(z, rel=0.05), mode
        for side in report["inputs"]:  # per lag bucket, the same partners
            assert len(side["processed_by_bucket"]) == len(side["shed_by_bucket"]) == 11
            assert sum(side["processed_by_bucket"]) == pytest.approx(side["processed"], abs=6)
            assert sum(side["shed_by_bucket"]) == pytest.approx(side["shed"], abs=6)


@pytest.mark.parametrize(("query", "fragment", "at"), [
    ("CREATE QUERY q WITH (shedding='adaptive') AS SELECT k, sum(v) AS n FROM s [RANGE 10] "
     "GROUP BY k", "this query has none", "shedding="),
    ("CREATE QUERY q WITH (shedding='random') AS SELECT s.k FROM s [UNBOUNDED] "
     "JOIN r [RANGE 5] ON s.k = r.k", "RANGE, NOW or CUT windows", "shedding="),
    ("CREATE QUERY q WITH (shedding='random', throttle='2') AS " + JOIN, "(0, 1]", "2'"),
    ("CREATE QUERY q WITH (shedding='adaptive', shedding_control='fast') AS " + JOIN,
     "use 'budget'", "fast'"),
    ("CREATE QUERY q WITH (shedding='adaptive', shedding_control='ratio', "
     "latency_budget='1 SECOND') AS " + JOIN, "whatever the cycle time", "latency_budget="),
    ("CREATE QUERY q WITH (shedding_control='ratio') AS " + JOIN, "which is off",
     "shedding_control="),
])
def test_shedding_where_it_cannot_apply_is_refused_at_the_option(spark, query, fragment, at):
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    with pytest.raises(AnalysisError) as e:
        eng.execute(query)
    assert fragment in str(e.value)
    assert e.value.loc is not None
    assert e.value.loc.col == query.index(at) + 1
    assert "q" not in eng.queries.running


def test_a_join_that_sheds_is_not_shared_with_one_that_does_not(spark):
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    eng.execute(f"CREATE QUERY plain AS {JOIN}")
    eng.execute(f"CREATE QUERY shed WITH (shedding='random', throttle='0.5') AS {JOIN}")
    joins = [n.label() for n in eng.queries.plan.ops if n.label().startswith("IntervalJoin")]
    assert len(joins) == 2
    assert sum("SHEDDING random (10 sub-windows, z=0.5)" in j for j in joins) == 1


def test_adaptive_priorities_find_the_lag_of_the_partners_and_follow_its_shift(spark):
    """b's partner of an a-tuple lies 20-30 units behind it, from instant 200 on 40-50:
    with sub-windows of 10 the a-side's probers find their partners 2-3 buckets back,
    later 4-5. The b-side's probers find only noise. Learnt from a 5% sample, aged by 0.3
    per cycle: the top two buckets are right within three cycles of the shift.
    """
    cycle, shift, length = 20, 200, 360
    a_rows, b_rows = correlated_streams(3, length, 8.0, [Lag(0, 20, 30), Lag(shift, 40, 50)])
    eng = Engine(spark=spark)
    eng.execute("""
        CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM b (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY j WITH (shedding='adaptive', throttle='0.4', basic_windows='6')
          AS SELECT a.k AS k, a.v AS v FROM a [RANGE 60] JOIN b [RANGE 60]
          ON a.k = b.k AND a.v = b.v
    """)
    tops = {}
    for c in range(length // cycle):
        lo, hi = c * cycle, (c + 1) * cycle
        eng.push("a", [r for r in a_rows if lo <= r["t"] < hi], watermark=hi)
        eng.push("b", [r for r in b_rows if lo <= r["t"] < hi], watermark=hi)
        eng.run_cycle()
        [report] = eng.metrics()["shedding"].values()
        priorities = report["inputs"][0]["priorities"]
        tops[hi] = set(sorted(range(len(priorities)), key=lambda j: -priorities[j])[:2])
    assert all(tops[hi] == {2, 3} for hi in tops if 3 * cycle <= hi <= shift), tops
    assert all(tops[hi] == {4, 5} for hi in tops if hi >= shift + 3 * cycle), tops
    # the b-side's probers meet only noise: nothing to rank
    assert max(report["inputs"][1]["priorities"]) == 0
    line = next(x for x in eng.explain_global().splitlines() if "IntervalJoin" in x)
    assert f"left met {report['inputs'][0]['processed']} " in line
    assert "top buckets [4, 5]" in line or "top buckets [5, 4]" in line


class SlowSink(CollectingSink):
    """A sink whose commits take an injected clock's seconds: ``fixed`` plus ``per_pair``
    for each pair the join found in the cycle (each new record), so that a cycle's time
    grows with the join's work.
    """

    def __init__(self, clock: ManualClock, fixed: float, per_pair: float = 0.0):
        super().__init__()
        self.clock, self.fixed, self.per_pair = clock, fixed, per_pair

    def write(self, cycle: int, records: dict) -> None:  # noqa: D102
        n = sum(int((frame["_op"] == "I").sum()) for _out, frame in records.values())
        self.clock.advance(self.fixed + self.per_pair * n)
        super().write(cycle, records)


def adaptive_engine(spark, clock: ManualClock, sink: SlowSink, **options) -> Engine:
    eng = Engine(spark=spark, clock=clock, sinks={"slow": sink}, **options)
    if options.get("checkpoint_dir") and eng.cycle > 0:
        return eng  # recovered: its statements came back from the journal
    eng.execute(STREAMS)
    eng.execute("CREATE QUERY j INTO slow WITH (shedding='adaptive', latency_budget='2 SECONDS', "
                "basic_windows='4') AS SELECT s.k AS k, s.v AS v, r.w AS w "
                "FROM s [RANGE 40] JOIN r [RANGE 40] ON s.k = r.k")
    return eng


def feed_cycle(eng: Engine, c: int, rows: int = 30) -> float:
    """Push cycle ``c``'s rows (10 time units of them) and run it; its seconds."""
    rng = random.Random(c)
    for stream, column in (("s", "v"), ("r", "w")):
        eng.push(stream, [{"k": f"k{rng.randrange(3)}", column: 100 * c + i,
                           "t": 10 * c + rng.randrange(10)} for i in range(rows)],
                 watermark=10 * (c + 1))
    return eng.run_cycle().seconds


def test_z_falls_to_what_the_budget_holds_and_grows_back_when_the_input_calms(spark):
    """A cycle costs 0.5 s and 5 ms per pair the join finds (the injected clock): 30 rows
    a cycle per stream make the first one run over the budget of 2 s at z = 1. From the
    next one on, z is what fits in half the budget (the cost of a cycle taken from the
    last one, then fitted to the recent ones), and every cycle keeps within the budget
    while the windows fill; when the input falls to 3 rows a cycle, z grows back by 1.5 a
    cycle.
    """
    clock = ManualClock()
    eng = adaptive_engine(spark, clock, SlowSink(clock, 0.5, 0.005))
    seconds, zs = [], []
    for c in range(14):
        seconds.append(feed_cycle(eng, c, rows=30 if c < 8 else 3))
        [report] = eng.metrics()["shedding"].values()
        zs.append(report["z"])
    assert seconds[0] > 2.0 and zs[0] == 1.0
    assert all(s <= 2.0 for s in seconds[1:]), seconds
    assert all(z < 0.2 for z in zs[1:9]), zs
    assert zs[9:] == pytest.approx([min(1.0, z * 1.5) for z in zs[8:-1]])
    log = "\n".join(eng.query_log("j"))
    assert ("cycle 1: shedding z 1.00 -> 0.17: 900 partners met in 2.02 s; 60 rows wait, "
            "2,700 partners to meet at z = 1: 0.17 of them fit in 1 s of the budget of 2 s"
            in log)
    # from the fifth cycle with work (the first one aside) on, a fitted cost
    assert re.search(r"cycle 5: shedding z [0-9.]+ -> [0-9.]+: a cycle costs .* "
                     r"\(fitted to 4 cycles\)", log)



def test_the_ratio_control_follows_rows_processed_over_rows_received(spark):
    """shedding_control='ratio': before each cycle z is times the rows the last cycle took
    over the rows that came meanwhile (those waiting now), up by at most 1.5 a cycle. Every
    cycle takes 5 s on the injected clock, over any budget: the time does not move z.
    By hand, per stream and cycle 20, 40, 40, 20, 10, 10 rows: z is 1, then 40/80 of 1 =
    0.5, 80/80 of it = 0.5, 80/40 of it held to 1.5 times = 0.75, 40/20 of it = 1 (at most
    1), 1.
    """
    clock = ManualClock()
    eng = Engine(spark=spark, clock=clock, sinks={"slow": SlowSink(clock, 5.0)})
    eng.execute(STREAMS)
    eng.execute("CREATE QUERY j INTO slow WITH (shedding='adaptive', shedding_control='ratio', "
                "basic_windows='4') AS SELECT s.k AS k, s.v AS v, r.w AS w "
                "FROM s [RANGE 40] JOIN r [RANGE 40] ON s.k = r.k")
    zs = []
    for c, rows in enumerate([20, 40, 40, 20, 10, 10]):
        feed_cycle(eng, c, rows)
        [report] = eng.metrics()["shedding"].values()
        zs.append(report["z"])
    assert zs == pytest.approx([1.0, 0.5, 0.5, 0.75, 1.0, 1.0])
    log = "\n".join(eng.query_log("j"))
    assert ("cycle 1: shedding z 1.00 -> 0.50: the last cycle processed 40 rows while 80 "
            "came: 50% of them" in log)
    line = next(x for x in eng.explain_global().splitlines() if "IntervalJoin" in x)
    assert "(4 sub-windows, rows processed / received)" in line
    assert "shedding z=1.00 control=ratio: left met" in line

def test_a_redone_cycle_sheds_as_it_did_before_the_crash(spark, tmp_path):
    """The z of each cycle is logged with its input: a restart that redoes the cycles
    after its checkpoint (whose cycles now take no time) joins the same pairs.
    """
    folder = str(tmp_path / "ck")
    clock = ManualClock()
    first = SlowSink(clock, 5.0)
    eng = adaptive_engine(spark, clock, first, checkpoint_dir=folder, checkpoint_every=100)
    for c in range(4):
        feed_cycle(eng, c)
    again = SlowSink(ManualClock(), 0.0)
    redone = adaptive_engine(spark, again.clock, again, checkpoint_dir=folder,
                             checkpoint_every=100)
    assert redone.cycle == 4
    def raw(frame: pd.DataFrame) -> list[tuple]:
        return sorted(tuple(str(x) for x in r) for r in frame.itertuples(index=False))

    before = {c: raw(f) for c, f in first.cycles["j"]}
    after = {c: raw(f) for c, f in again.cycles["j"]}
    assert after == before
    assert len(after) >= 3  # cycles with pairs, redone


def test_a_three_way_join_sheds_at_each_join_and_emits_only_true_triples(spark):
    """s JOIN r JOIN u over 30-unit windows: an interval join of s and r, and one of its
    pairs with u. Unshed, every triple with its interval, computed here. At z = 0.5 both
    joins shed (each counts the work it skipped), and every record is a triple with its
    interval; fewer than all of them.
    """
    rng = random.Random(5)
    rows = {name: [{"k": f"k{rng.randrange(3)}", col: 1000 * n + i, "t": rng.randrange(120)}
                   for i in range(60)]
            for n, (name, col) in enumerate((("s", "v"), ("r", "w"), ("u", "x")))}
    triples = {}
    for a in rows["s"]:
        for b in rows["r"]:
            for c in rows["u"]:
                start = max(a["t"], b["t"], c["t"])
                end = min(a["t"], b["t"], c["t"]) + 30
                if a["k"] == b["k"] == c["k"] and start < end:
                    triples[(a["v"], b["w"], c["x"])] = (start, end)
    eng = Engine(spark=spark)
    eng.execute(STREAMS + "CREATE STREAM u (k STRING, x BIGINT, t BIGINT) "
                          "WITH (event_time='t');")
    join3 = ("SELECT s.v AS v, r.w AS w, u.x AS x FROM s [RANGE 30] JOIN r [RANGE 30] "
             "ON s.k = r.k JOIN u [RANGE 30] ON s.k = u.k")
    eng.execute(f"CREATE QUERY j3 WITH (shedding='random', throttle='0.5', "
                f"basic_windows='3') AS {join3}")
    eng.execute(f"CREATE QUERY all3 AS {join3}")
    assert eng.explain("j3").count("SHEDDING random") == 2
    for lo in range(0, 120, 20):
        for name in ("s", "r", "u"):
            eng.push(name, [e for e in rows[name] if lo <= e["t"] < lo + 20],
                     watermark=lo + 20, end=lo + 20 >= 120)
        eng.run_cycle()
    eng.run_until_idle()

    def got(query: str) -> list[tuple]:
        frame = eng.results(query)
        return [((int(v), int(w), int(x)), (int(ts), None if pd.isna(te) else int(te)))
                for v, w, x, ts, te in frame[["v", "w", "x", "_ts", "_te"]].itertuples(
                    index=False)]

    assert sorted(got("all3")) == sorted(triples.items())
    shed = got("j3")
    assert len({g for g, _ in shed}) == len(shed)
    assert [g for g in shed if triples.get(g[0]) != g[1]] == []
    assert 0 < len(shed) < len(triples)
    reports = eng.metrics()["shedding"]
    assert len(reports) == 2  # both joins shed
    for report in reports.values():
        assert sum(side["shed"] for side in report["inputs"]) > 0


def test_the_work_per_bucket_comes_from_exact_counts_when_an_input_runs_far_ahead(spark):
    """Sub-windows of 10 and cycles of 20: the commit counts a cycle's new elements by
    sub-window as it writes them. In the second cycle s runs 280 units ahead of r, so its
    new elements lie in 28 sub-windows, too many for the commit's eight classes: they are
    counted again by a job of their own. Either way each direction's work per lag bucket
    is what the rows pushed here give (probers by sub-window times partners ``j`` back).
    """
    rng = random.Random(5)
    eng = Engine(spark=spark)
    eng.execute(STREAMS)
    eng.execute("CREATE QUERY j WITH (shedding='adaptive', throttle='0.5', "
                "basic_windows='6') AS SELECT s.k AS k, s.v AS v, r.w AS w "
                "FROM s [RANGE 60] JOIN r [RANGE 60] ON s.k = r.k")
    s_rows = [dict(k=f"k{rng.randrange(3)}", v=i, t=rng.randrange(20)) for i in range(30)]
    r_rows = [dict(k=f"k{rng.randrange(3)}", w=i, t=rng.randrange(20)) for i in range(30)]
    eng.push("s", s_rows, watermark=20)
    eng.push("r", r_rows, watermark=20)
    eng.run_cycle()
    s_new = [dict(k=f"k{rng.randrange(3)}", v=100 + i, t=20 + rng.randrange(280))
             for i in range(60)]
    r_new = [dict(k=f"k{rng.randrange(3)}", w=100 + i, t=20 + rng.randrange(20))
             for i in range(30)]
    eng.push("s", s_new, watermark=300)
    eng.push("r", r_new, watermark=40)
    eng.run_cycle()
    assert eng.cycle_costs(1)[-1].work.jobs == 2  # the commit, and s counted again

    def by_sub_window(rows: list[dict]) -> dict[int, int]:
        return dict(Counter(r["t"] // 10 for r in rows))

    buckets = 7
    [report] = eng.metrics()["shedding"].values()
    s_work, r_work = (side["work"] for side in report["inputs"])
    assert s_work == pytest.approx(work_per_bucket(
        by_sub_window(s_new), by_sub_window(r_rows + r_new), buckets))
    assert r_work == pytest.approx(work_per_bucket(
        by_sub_window(r_new), by_sub_window(s_rows + s_new), buckets))


@pytest.mark.parametrize("lags", [
    [Lag(0, 20, 30)],  # b's partner 2-3 sub-windows behind its a-tuple: a probes
    [Lag(0, -30, -20)],  # ahead of it: b probes
    [Lag(0, -15, 15)],  # on both sides
    [Lag(0, 20, 30), Lag(240, -30, -20)],  # behind, then ahead
], ids=["behind", "ahead", "both-sides", "shifting"])
def test_adaptive_keeps_most_pairs_whichever_side_probes(spark, lags):
    """At z = 0.3 the adaptive join keeps at least 85% of the pairs (counted here from the
    generated partners) and twice what random shedding keeps, whether the partners lie
    behind the a-tuples, ahead of them (so the b-side probes), on both sides, or move
    from one side to the other: priorities are learnt per direction and per lag.
    """
    length, cycle = 480, 20
    a_rows, b_rows = correlated_streams(3, length, 8.0, lags)
    in_b = {r["v"] for r in b_rows if r["t"] < length}
    pairs = sum(r["v"] in in_b for r in a_rows)  # every partner lies within 30 of its tuple
    kept = {}
    for mode in ("adaptive", "random"):
        eng = Engine(spark=spark)
        eng.execute(f"""
            CREATE STREAM a (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
            CREATE STREAM b (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
            CREATE QUERY j WITH (shedding='{mode}', throttle='0.3', basic_windows='6')
              AS SELECT a.k AS k, a.v AS v FROM a [RANGE 60] JOIN b [RANGE 60]
              ON a.k = b.k AND a.v = b.v""")
        for c in range(length // cycle):
            lo, hi = c * cycle, (c + 1) * cycle
            eng.push("a", [r for r in a_rows if lo <= r["t"] < hi], watermark=hi)
            eng.push("b", [r for r in b_rows if lo <= r["t"] < hi], watermark=hi)
            eng.run_cycle()
        found = eng.results("j")
        new = found[found["_op"] == "I"] if "_op" in found else found
        assert set(new["v"]) <= in_b  # only true pairs
        kept[mode] = len(new)
    assert kept["adaptive"] >= 0.85 * pairs, (kept, pairs)
    assert kept["adaptive"] >= 2 * kept["random"], (kept, pairs)
