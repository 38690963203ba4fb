"""What users do to a running engine, generated: input out of order within the lateness
bound, stragglers beyond it, streams advancing in different cycles, idle streams,
heartbeats without rows, one stream ending long before another, queries added late.

A scenario holds many independent cases (example ids ``ex``) that share one engine run and
one cycle schedule: the events of all cases of a stream arrive in the order of their event
time plus a jitter within the stream's lateness (or beyond it, for stragglers), and are cut
into cycles at drawn points of that arrival order, differently for every stream. Each case
sees the cuts at other places of its own timeline, so one run checks many interleavings.

``run_scenario`` plays a scenario on a real engine and compares every query, case by case,
with the reference interpreter (``oracle.py``), and every stream's dead letters with the
events the contract calls late.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

import pandas as pd
from hypothesis import assume
from hypothesis import strategies as st
from oracle import UDA_DEFINITIONS, Arrivals, Batch, Shape, arrivals, why_not_whole_elements

from sparkcq import Engine
from sparkcq.runtime.partitioning import SmallCycles
from sparkcq.testing import Delete, EndOfCycle, EndOfInput, ListSource, Watermark

T_MAX = 30  # event times are drawn in [0, T_MAX]

#: cases checked per shape label over the test run (printed at the end of the session)
CASES_CHECKED: Counter[str] = Counter()
#: how cases met the cycle schedule: cases whose events each came in a cycle of their own, ...
SCHEDULE_STATS: Counter[str] = Counter()
#: what joins that shed below z = 1 emitted against the pairs of the join
SHED_PAIRS: Counter[str] = Counter()


@dataclass(frozen=True)
class StreamPlan:
    """One stream's lateness and what it delivers in each cycle; ``measured``: its batches
    are measured by the cycle's commit (as files are), not on the driver; ``key``: a keyed
    stream's key (its events include deletes)."""

    lateness: int
    batches: tuple[Batch, ...]
    measured: bool = False
    key: tuple[str, ...] = ()

    def items(self) -> list:
        """The stream's deliveries as a ``ListSource`` list, one marker per cycle."""
        out: list = []
        for batch in self.batches:
            out += [Delete({c: e[c] for c in (*self.key, "t")}) if e.get("del") else e
                    for e in batch.rows]
            if batch.end:
                out.append(EndOfInput())
            elif batch.watermark is not None:
                out.append(Watermark(batch.watermark))
            else:
                out.append(EndOfCycle())
        return out


@dataclass(frozen=True)
class Scenario:
    """Cases ``0 .. cases-1`` of every stream, delivered over the same cycles."""

    streams: dict[str, StreamPlan]
    cases: int
    cycles: int  # the engine runs this many (a stream's deliveries may end sooner)
    fuse: bool = True

    def __repr__(self) -> str:
        streams = ", ".join(
            f"{s}: {sum(len(b.rows) for b in p.batches)} events in {len(p.batches)} cycles, "
            f"lateness {p.lateness}{', measured' if p.measured else ''}"
            f"{', key ' + '+'.join(p.key) if p.key else ''}"
            for s, p in self.streams.items())
        return f"Scenario({self.cases} cases, {self.cycles} cycles, fuse={self.fuse}; {streams})"

    def arrivals(self) -> dict[str, Arrivals]:
        return {s: arrivals(p.batches, p.lateness, p.measured) for s, p in self.streams.items()}

    def describe(self, ex: int) -> str:
        """Case ``ex`` as delivered: per stream and cycle its rows and the watermark after."""
        lines = []
        for name, plan in self.streams.items():
            marks = arrivals(plan.batches, plan.lateness, plan.measured).watermarks
            cycles = []
            for c, batch in enumerate(plan.batches):
                rows = [("delete", e["k"], e["v"], e["t"]) if e.get("del")
                        else (e["k"], e["v"], e["t"]) for e in batch.rows if e["ex"] == ex]
                note = " end" if batch.end else (f" heartbeat {batch.watermark}"
                                                 if batch.watermark is not None else "")
                if rows or note:
                    cycles.append(f"cycle {c}: {rows}{note} -> watermark {marks[c]}")
            how = ", measured by the commit" if plan.measured else ""
            how += f", key {'+'.join(plan.key)}" if plan.key else ""
            lines.append(f"  {name} (lateness {plan.lateness}{how}): " + "; ".join(cycles))
        return "\n".join(lines)


# -- strategies ------------------------------------------------------------------------------
def _events(lateness: int, stragglers: bool, max_events: int,
            deletes: bool = False) -> st.SearchStrategy:
    """(k, v, t, jitter, delete) of one case in one stream; jitter past the lateness makes
    stragglers; ``deletes``: about one event in four is a delete (of a keyed stream)."""
    jitters = list(range(lateness + 1)) * 3 + (list(range(lateness + 1, lateness + 7))
                                               if stragglers else [])
    return st.lists(st.tuples(st.sampled_from("xy"), st.integers(0, 9),
                              st.integers(0, T_MAX), st.sampled_from(jitters),
                              st.sampled_from([False, False, False, True]) if deletes
                              else st.just(False)),
                    max_size=max_events)


def _event(ex: int, k: str, v: int, t: int, delete: bool, key: tuple[str, ...]) -> dict:
    """An event; a delete has its key's columns and time, None elsewhere."""
    e = {"ex": ex, "k": k, "v": v, "t": t}
    if not delete:
        return e
    return {**{c: (x if c in (*key, "t") else None) for c, x in e.items()}, "del": True}


@st.composite
def stream_plans(draw, events: list[tuple[dict, int]], cycles: int, lateness: int,
                 cases: int, measured: bool = False, key: tuple[str, ...] = ()) -> StreamPlan:
    """Cut one stream's events (with their jitter) into ``cycles`` deliveries.

    The stream uses the first ``span`` cycles only (so it may run far ahead of the others),
    cut at drawn points of its arrival order; it may go idle for a run of cycles (nothing,
    not even a heartbeat), defer some cycles' rows to the next one sending only a heartbeat,
    and end right after its last rows or only at the last cycle. Some deliveries also carry
    events right at the watermark in force.
    """
    ordered = sorted(events, key=lambda x: (x[0]["t"] + x[1], x[0]["ex"]))
    span = draw(st.integers(1, cycles), label="span")
    cuts = sorted(draw(st.lists(st.integers(0, T_MAX + 10), min_size=span - 1,
                                max_size=span - 1), label="cuts"))
    per_cycle: list[list[dict]] = [[] for _ in range(cycles)]
    c = 0
    for e, j in ordered:
        while c < span - 1 and e["t"] + j >= cuts[c]:
            c += 1
        per_cycle[c].append(e)

    def defer(cycle: int, to: int) -> None:
        per_cycle[to] = per_cycle[cycle] + per_cycle[to]
        per_cycle[cycle] = []

    heartbeat_only = draw(st.sets(st.integers(0, cycles - 2), max_size=cycles // 2)
                          if cycles > 1 else st.just(set()), label="heartbeat only")
    for i in sorted(heartbeat_only):
        defer(i, i + 1)
    idle = draw(st.none() | st.tuples(st.integers(0, cycles - 1), st.integers(1, cycles)),
                label="idle")
    quiet: set[int] = set()
    if idle is not None:
        first, length = idle
        last = min(first + length, cycles - 1)
        quiet = set(range(first, last))
        for i in sorted(quiet):
            defer(i, last)
    heartbeat_only -= quiet
    filled = [i for i, rows in enumerate(per_cycle) if rows]
    end_at = cycles - 1
    if draw(st.booleans(), label="ends early"):
        end_at = filled[-1] if filled else 0
    beats = draw(st.lists(st.booleans(), min_size=cycles, max_size=cycles), label="heartbeats")
    batches: list[Batch] = []
    for i, rows in enumerate(per_cycle[:end_at + 1]):
        later = [e["t"] for rows_after in per_cycle[i + 1:] for e in rows_after]
        mark = None
        if (beats[i] or i in heartbeat_only) and i not in quiet and i < end_at:
            mark = min(later) if later else T_MAX + 5  # the tightest honest heartbeat
        if i > 0 and draw(st.booleans(), label="at the watermark"):
            rows = [*rows, *draw(_at_watermark(batches, lateness, cases, measured))]
        batches.append(Batch(tuple(rows), mark, end=i == end_at))
    return StreamPlan(lateness, tuple(batches), measured, key)


def _at_watermark(batches: list[Batch], lateness: int, cases: int,
                  measured: bool) -> st.SearchStrategy:
    """Events right at the watermark the earlier deliveries set: one just below it (late)
    and one at it (on time), where off-by-one mistakes in lateness would show."""
    mark = arrivals(batches, lateness, measured).watermarks[-1]
    if not 0 < mark <= T_MAX:
        return st.just([])
    return st.lists(st.builds(lambda ex, k, v, t: {"ex": ex, "k": k, "v": v, "t": t},
                              st.integers(0, cases - 1), st.sampled_from("xy"),
                              st.integers(0, 9), st.sampled_from([int(mark) - 1, int(mark)])),
                    min_size=1, max_size=2)


#: keys a keyed stream of a scenario may have: one row per case and k (a delete names
#: both), or one per case and v (rows move between groups of k as they replace each other)
KEYS = [("ex", "k"), ("ex", "v")]


@st.composite
def scenarios(draw, streams: tuple[str, ...], cases: int, min_cycles: int = 3,
              max_cycles: int = 8, max_events: int = 6, stragglers: bool = True,
              keyed: tuple[str, ...] = ()) -> Scenario:
    """Cases of events on ``streams``, each stream cut into cycles its own way; the
    ``keyed`` ones are keyed streams with a drawn key, their events rows and deletes."""
    lateness = {s: draw(st.sampled_from([0, 0, 1, 3]), label=f"lateness {s}") for s in streams}
    late = {s: stragglers and draw(st.booleans(), label=f"stragglers {s}") for s in streams}
    keys = {s: draw(st.sampled_from(KEYS), label=f"key {s}") if s in keyed else ()
            for s in streams}
    events: dict[str, list[tuple[dict, int]]] = {s: [] for s in streams}
    for ex in range(cases):
        for s in streams:
            for k, v, t, j, d in draw(_events(lateness[s], late[s], max_events, s in keyed)):
                events[s].append((_event(ex, k, v, t, d, keys[s]), j))
    # hypothesis tries simple examples first (every event at t=0, v=0); a scenario is an
    # engine run, so spend it on input spread over time, values and keys
    for s in streams:
        rows = [e for e, _ in events[s] if not e.get("del")]
        assume(len(events[s]) >= cases)
        assume(len({e["t"] for e, _ in events[s]}) > T_MAX // 2)
        assume(len({e["v"] for e in rows}) > 5 and len({e["k"] for e in rows}) == 2)
    cycles = draw(st.integers(min_cycles, max_cycles), label="cycles")
    # some streams' batches are measured by the cycle's commit, as files are (the watermark
    # then moves a cycle later), the others' on the driver, as pushed rows are
    measured = {s: draw(st.booleans(), label=f"measured {s}") for s in streams}
    plans = {s: draw(stream_plans(events[s], cycles, lateness[s], cases, measured[s], keys[s]))
             for s in streams}
    return Scenario(plans, cases, cycles, fuse=draw(st.booleans(), label="fuse"))


# -- running and checking --------------------------------------------------------------------
@dataclass
class Query:
    """A query of a scenario: its shape, and the cycle before which it is submitted.

    A query submitted late reads one stream; ``shared``: above a relation other queries
    already computed, so it starts from that relation's contents.
    """

    shape: Shape
    label: str
    start: int = 0
    shared: bool = False
    # a join that sheds below z = 1: its records are some of the reference's elements,
    # coalesced, not all of them (``oracle.why_not_whole_elements``)
    subset: bool = False
    # submitted as SQL, or in the StreamAPAS language (the shape's ``apas()``)
    language: str = "sql"
    # the query of this name in other words (``twin_sql``): it must share every operator
    twin_of: str | None = None

    def labels(self) -> set[str]:
        """What the query exercises, for the count of cases per feature."""
        labels = {self.label} | self.shape.features()
        if self.twin_of is not None:
            labels = {"twin in other words: " + self.label}
        return {f"apas: {x}" for x in labels} if self.language == "apas" else labels

    def text(self) -> str:
        """The query as submitted."""
        if self.language == "apas":
            text = self.shape.apas()
            assert text is not None, f"{self.shape} has no StreamAPAS form"
            return text
        return self.shape.sql() if self.twin_of is None else twin_sql(self.shape.sql())


#: what ends a join's ON clause (outside parentheses)
_ON_ENDS = re.compile(r" (WHERE|GROUP BY|HAVING|UNION|EXCEPT|INTERSECT|ORDER BY|LIMIT"
                      r"|(?:(?:LEFT|RIGHT|FULL|INNER)(?: OUTER)? )?JOIN) ")


def twin_sql(sql: str) -> str:
    """``sql`` in other words that mean the same: its FROM aliases renamed (``AS a`` to
    ``AS a_t``), each equality of qualified columns turned around, ``x > n`` written
    ``n < x``, and a join's ON conjuncts in reverse order.
    """
    for alias in {m[1] for m in re.finditer(r"\bAS (\w+)\b", sql)}:
        if re.search(rf"\b{alias}\.", sql):
            sql = re.sub(rf"\b{alias}\.", f"{alias}_t.", sql)
            sql = re.sub(rf"\bAS {alias}\b", f"AS {alias}_t", sql)
    sql = re.sub(r"\b(\w+\.\w+) = (\w+\.\w+)\b", r"\2 = \1", sql)
    sql = re.sub(r"(?<![\w.(])(\w+(?:\.\w+)?) > (\d+)\b", r"\2 < \1", sql)
    out, at = [], 0
    for on in re.finditer(r" ON ", sql):
        if sql.count("[", 0, on.start()) > sql.count("]", 0, on.start()):
            continue  # CUT ON in a window clause
        start, depth, end = on.end(), 0, len(sql)
        for i in range(start, len(sql)):
            depth += {"(": 1, ")": -1}.get(sql[i], 0)
            if depth < 0 or (depth == 0 and _ON_ENDS.match(sql, i)):
                end = i
                break
        conjuncts = sql[start:end].split(" AND ")  # the shapes' ON has no OR or BETWEEN
        out += [sql[at:start], " AND ".join(reversed(conjuncts))]
        at = end
    return "".join([*out, sql[at:]])


@dataclass
class Outcome:
    """What an engine run produced."""

    results: dict[str, pd.DataFrame]
    dead: dict[str, pd.DataFrame]
    logs: dict[str, list[str]]
    status: dict[str, str]
    watermarks: list[dict[str, float]] = field(default_factory=list)  # after each cycle
    plan: str = ""  # EXPLAIN GLOBAL at the end of the run


def run_scenario(spark, scenario: Scenario, queries: dict[str, Query],
                 udas: bool = False, layout: str = "auto") -> Outcome:
    """Play ``scenario`` on a new engine: queries are submitted before their start cycle;
    its cycles run in the ``layout`` given (``SmallCycles.parse``).
    """
    eng = Engine(spark=spark, fuse=scenario.fuse, allow_udf_modules=["udas", "tablefns"],
                 small_cycles=SmallCycles.parse(layout))
    if udas:
        eng.execute(UDA_DEFINITIONS)
    for name, plan in scenario.streams.items():
        key = f", key='{', '.join(plan.key)}'" if plan.key else ""
        eng.execute(f"CREATE STREAM {name} (ex BIGINT, k STRING, v BIGINT, t BIGINT) "
                    f"WITH (event_time='t', lateness='{plan.lateness}'{key})")
        eng.attach_source(name, ListSource(plan.items(), on_driver=not plan.measured))
    for name, rows in {n: r for q in queries.values() for n, r in q.shape.tables().items()}.items():
        eng.register_table(name, rows)
    setups = dict.fromkeys(q.shape.setup() for q in queries.values() if q.shape.setup())
    for statement in setups:
        eng.execute(statement)
    marks = []
    for cycle in range(scenario.cycles):
        for name, query in queries.items():
            if query.start == cycle and query.language == "apas":
                eng.create_query(name, query.text(), language="apas")
            elif query.start == cycle:
                eng.execute(f"CREATE QUERY {name} {query.shape.options()} AS "
                            f"{query.text()}")
        eng.run_cycle()
        marks.append(dict(eng.metrics()["watermarks"]))
    assert not eng.has_pending_input()
    out = Outcome({n: eng.results(n) for n in queries},
                  {s: eng.dead_letters(s) for s in scenario.streams},
                  {n: eng.query_log(n) for n in queries},
                  {n: s for n, s in eng.show("QUERIES")[["name", "status"]].values}, marks,
                  eng.explain_global())
    eng.stop()
    return out


def check_scenario(spark, scenario: Scenario, queries: dict[str, Query],
                   udas: bool = False, layout: str = "auto") -> Outcome:
    """Run ``scenario`` and assert every query equals the reference, case by case, and every
    stream's dead letters are exactly its late events.
    """
    outcome = run_scenario(spark, scenario, queries, udas, layout)
    arrived = scenario.arrivals()
    accepted = {s: a.accepted for s, a in arrived.items()}
    for name, query in queries.items():
        assert outcome.status[name] == "running", (
            f"{name} = {query.text()} stopped: {outcome.logs[name][-2:]}")
        if query.twin_of is not None:
            assert_shares_every_operator(outcome.plan, name, query.twin_of)
        start = None
        if query.start > 0:
            marks = arrived[query.shape.stream].watermarks  # type: ignore[attr-defined]
            start = marks[query.start - 1] if query.start <= len(marks) else math.inf
        got = per_case(engine_records(outcome.results[name], query.shape.records_kind))
        if query.subset:
            elements = per_case(list(query.shape.relation(accepted).elements))
            for ex in range(scenario.cases):
                why = why_not_whole_elements(got.get(ex, []), elements.get(ex, []))
                assert why is None, (
                    f"{name} = {query.text()}\ncase {ex}:\n{scenario.describe(ex)}\n"
                    f"{why}\nengine:   {got.get(ex, [])}\nelements: {elements.get(ex, [])}")
            SHED_PAIRS["pairs of the join"] += sum(map(len, elements.values()))
            SHED_PAIRS["... emitted records"] += sum(map(len, got.values()))
            for label in query.labels():
                CASES_CHECKED[label] += scenario.cases
            continue
        want = per_case(query.shape.records(accepted, start, query.shared))
        for ex in range(scenario.cases):
            assert got.get(ex, []) == want.get(ex, []), (
                f"{name} = {query.text()}"
                + (f"\nsubmitted before cycle {query.start}, from {start}" if start else "")
                + f"\ncase {ex}:\n{scenario.describe(ex)}\n"
                f"engine:    {got.get(ex, [])}\nreference: {want.get(ex, [])}")
        for label in query.labels():
            CASES_CHECKED[label] += scenario.cases
    for stream, arrival in arrived.items():
        dead = outcome.dead[stream]
        got_dead = sorted((tuple(clean(x) for x in r)
                           for r in dead[["ex", "k", "v", "t"]].itertuples(index=False)),
                          key=_order)
        want_dead = sorted(((e["ex"], e["k"], e["v"], e["t"]) for e, _ in arrival.late),
                           key=_order)
        assert got_dead == want_dead, f"dead letters of {stream}: {got_dead} != {want_dead}"
        assert all(r.startswith("late: event time") for r in dead["_reason"])
        CASES_CHECKED["late events sent to the dead letters"] += len(want_dead)
    _count_schedules(scenario)
    return outcome


def assert_shares_every_operator(plan: str, twin: str, original: str) -> None:
    """Every operator of the global plan that ``twin`` uses, ``original`` uses too."""
    used = 0
    for line in plan.splitlines():
        users = re.search(r"queries=\[([^\]]*)\]", line)
        if users is None or twin not in users[1].split(", "):
            continue
        used += 1
        assert original in users[1].split(", "), (
            f"{twin} has an operator of its own, not {original}'s:\n{line}\n\n{plan}")
    assert used, f"{twin} is in no operator of the plan:\n{plan}"


def _count_schedules(scenario: Scenario) -> None:
    SCHEDULE_STATS["scenarios"] += 1
    SCHEDULE_STATS["cycles"] += scenario.cycles
    for plan in scenario.streams.values():
        SCHEDULE_STATS["events"] += sum(len(b.rows) for b in plan.batches)
        if plan.key:
            SCHEDULE_STATS["... deletes of a keyed stream"] += sum(
                1 for b in plan.batches for e in b.rows if e.get("del"))
        SCHEDULE_STATS["heartbeats without rows"] += sum(
            1 for b in plan.batches if not b.rows and b.watermark is not None)
        SCHEDULE_STATS["cycles a stream delivered nothing"] += sum(
            1 for b in plan.batches if not b.rows and b.watermark is None and not b.end)
        SCHEDULE_STATS["cycles after a stream ended"] += scenario.cycles - len(plan.batches)
    for ex in range(scenario.cases):
        cycles = [c for plan in scenario.streams.values() for c, b in enumerate(plan.batches)
                  for e in b.rows if e["ex"] == ex]
        if len(cycles) < 2:
            continue
        SCHEDULE_STATS["cases with 2+ events"] += 1
        if len(set(cycles)) == len(cycles):
            SCHEDULE_STATS["... each event in a cycle of its own"] += 1
        if len(set(cycles)) > 1:
            SCHEDULE_STATS["... spread over several cycles"] += 1


def engine_records(frame: pd.DataFrame, kind: str) -> list[tuple]:
    """A query's results in the reference's record form."""
    cols = [c for c in frame.columns if c not in ("_ts", "_te", "_op")]
    out = []
    for rec in frame.to_dict("records"):
        row = tuple(clean(rec[c]) for c in cols)
        if kind == "intervals":
            out.append((row, clean(rec["_ts"]), clean(rec["_te"])))
        elif kind == "changelog":
            out.append((row, clean(rec["_ts"]), rec["_op"]))
        else:
            out.append((row, clean(rec["_ts"])))
    return out


def clean(x: object) -> object:
    """Plain Python values, floats rounded, NULL as None."""
    if x is None or (not isinstance(x, str) and pd.isna(x)):  # type: ignore[arg-type]
        return None
    if hasattr(x, "item"):
        x = x.item()  # type: ignore[union-attr]
    if isinstance(x, float):
        return x if math.isinf(x) else round(x, 9)
    return x


def per_case(records: list[tuple]) -> dict[int, list[tuple]]:
    """Records by example id (the first output column), each list in canonical order."""
    out: dict[int, list[tuple]] = {}
    for rec in records:
        row = tuple(clean(v) for v in rec[0])
        out.setdefault(row[0], []).append((row, *(clean(v) for v in rec[1:])))
    return {ex: sorted(rows, key=_order) for ex, rows in out.items()}


def _order(x: object) -> tuple:
    assert isinstance(x, tuple)
    return tuple(_order(v) if isinstance(v, tuple) else (v is None, str(type(v)), v) for v in x)
