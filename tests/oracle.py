"""A small per-event reference interpreter of sparkcq's semantics, in plain Python.

It evaluates a query the way ``docs/semantics.md`` defines it: decide from what each
stream delivered which events are accepted and which are late; turn events into elements
with their windows; evaluate ordinary SQL on the snapshot at every instant where an input
changes; turn the sequence of snapshots back into coalesced elements, instants or a
changelog. It knows nothing of change events, operators or Spark, which is the point; it
imports nothing from the engine.

Query shapes are dataclasses that render themselves to the engine's SQL and evaluate
themselves here, so the two cannot disagree about what the query is. Every query carries an
example id column ``ex`` as its first output column and in its keys, so many independent
cases share one engine run and a failure is reported for one case.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from fractions import Fraction

INF = math.inf
Event = dict  # ex, k, v, t; a keyed stream's delete also has "del": True (and None for
# the columns outside its key)
Element = tuple[tuple, float, float]  # row values, ts, te


# -- input: what streams deliver, which events count ----------------------------------------
@dataclass(frozen=True)
class Batch:
    """What one stream delivers in one cycle: rows, then a heartbeat or the end of input."""

    rows: tuple[Event, ...] = ()
    watermark: int | None = None
    end: bool = False


class StreamEvents(list):
    """A stream's accepted events, and the watermark it had reached where it ended (-inf:
    never; a count or key cut's last chunk is cut there at the earliest)."""

    def __init__(self, events: Iterable[Event] = (), ended_at: float = -INF):
        super().__init__(events)
        self.ended_at = ended_at


def ended_at(events: list[Event]) -> float:
    """Where the stream of ``events`` ended (-inf: unknown, or never)."""
    return events.ended_at if isinstance(events, StreamEvents) else -INF


@dataclass
class Arrivals:
    """The accepted and the late events of one stream, and its watermark after each cycle."""

    accepted: StreamEvents = field(default_factory=StreamEvents)
    late: list[tuple[Event, float]] = field(default_factory=list)  # event, watermark passed
    watermarks: list[float] = field(default_factory=list)


def arrivals(batches: Iterable[Batch], lateness: int, measured: bool = False) -> Arrivals:
    """Apply the watermark rule to a stream's deliveries, one batch per cycle.

    The watermark in force while a batch arrives is the one the previous batches set: the
    largest accepted event time minus the lateness, raised by heartbeats, +inf once the
    stream has ended. An event older than it is late: never applied, kept as a dead letter.

    ``measured``: the stream's batches are measured by the commit of the cycle they arrive
    in (files, generators), so a batch's largest event time raises the watermark from the
    next cycle on, as Spark Structured Streaming's watermark moves.
    """
    out = Arrivals()
    mark, seen, ended = -INF, None, False
    for batch in batches:
        batch_seen = None
        for row in batch.rows:
            if row["t"] < mark:
                out.late.append((row, mark))
            else:
                out.accepted.append(row)
                batch_seen = row["t"] if batch_seen is None else max(batch_seen, row["t"])
        if not measured and batch_seen is not None:
            seen = batch_seen if seen is None else max(seen, batch_seen)
        if seen is not None:
            mark = max(mark, seen - lateness)
        if measured and batch_seen is not None:
            seen = batch_seen if seen is None else max(seen, batch_seen)
        if batch.watermark is not None:
            mark = max(mark, batch.watermark)
        if batch.end and not ended:
            out.accepted.ended_at = mark
        ended = ended or batch.end
        if ended:
            mark = INF
        out.watermarks.append(mark)
    return out


# -- windows ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Win:
    """A window: kind in range/slide/now/unbounded/rows/cut/session, with its parameters.

    ``size``: range length, row count, chunk length or session gap; ``slide``: the hop, or
    for a cut the
    number of chunks an element stays valid; ``partition``: the columns ROWS counts within
    (none: one sequence over all cases), or a keyed stream's key (kind ``keyed``: not a
    window clause, how a keyed stream is read).
    """

    kind: str
    size: int = 0
    slide: int = 0
    partition: tuple[str, ...] = ()

    def sql(self) -> str:
        chunks = f" WINDOW {self.slide} CHUNKS" if self.kind == "cut" and self.slide > 1 else ""
        return {
            "range": f"[RANGE {self.size}]",
            "slide": f"[RANGE {self.size} SLIDE {self.slide}]",
            "now": "[NOW]",
            "unbounded": "[UNBOUNDED]",
            "rows": (f"[PARTITION BY {', '.join(self.partition)} ROWS {self.size}]"
                     if self.partition else f"[ROWS {self.size}]"),
            "cut": f"[CUT ON t BY {self.size}{chunks}]",
            "cutrows": f"[CUT EVERY {self.size} ROWS{self.chunks_sql()}]",
            "cutkey": f"[CUT ON {', '.join(self.partition)}{self.chunks_sql()}]",
            "session": (f"[PARTITION BY {', '.join(self.partition)} SESSION {self.size}]"
                        if self.partition else f"[SESSION {self.size}]"),
            "keyed": "",
        }[self.kind]

    def apas(self, stream: str) -> str | None:
        """The window as a StreamAPAS where-clause on ``$stream``, if the language has it."""
        return {
            "range": f"window.range(${stream}, {self.size})",
            "slide": f"window.range(${stream}, {self.size}, {self.slide})",
            "now": f"window.now(${stream})",
            "unbounded": f"window.unbounded(${stream})",
            "rows": None if self.partition else f"window.rows(${stream}, {self.size})",
        }.get(self.kind)

    def chunks_sql(self) -> str:
        return f" WINDOW {self.slide} CHUNKS" if self.slide > 1 else ""

    @property
    def name(self) -> str:
        """The window's kind as the dialect names it."""
        if self.kind == "rows":
            return "PARTITION BY ROWS" if self.partition else "ROWS"
        if self.kind == "cut":
            return "CUT WINDOW n CHUNKS" if self.slide > 1 else "CUT"
        if self.kind in ("cutrows", "cutkey"):
            what = "CUT EVERY n ROWS" if self.kind == "cutrows" else "CUT ON key"
            return what + (" WINDOW m CHUNKS" if self.slide > 1 else "")
        if self.kind == "session":
            return "PARTITION BY SESSION" if self.partition else "SESSION"
        return {"range": "RANGE", "slide": "RANGE SLIDE", "now": "NOW",
                "unbounded": "UNBOUNDED", "keyed": "keyed stream"}[self.kind]

    @property
    def period(self) -> int | None:
        """The evaluation period RSTREAM snapshots at (slide, or chunk length)."""
        return {"slide": self.slide, "cut": self.size}.get(self.kind)

    def elements(self, events: list[Event], columns: tuple[str, ...]) -> list[Element]:
        """Each event as an element (its values of ``columns``, ts, te)."""
        out = []
        if self.kind in ("cutrows", "cutkey"):
            return self.chunk_elements(events, columns)
        if self.kind == "keyed":
            return self.keyed_elements(events, columns)
        if self.kind == "session":
            return self.session_elements(events, columns)
        if self.kind == "rows":
            parts: dict[tuple, list[Event]] = {}
            for e in sorted(events, key=lambda e: (e["t"], *[e[c] for c in columns])):
                parts.setdefault(tuple(e[c] for c in self.partition), []).append(e)
            for rows in parts.values():
                for i, e in enumerate(rows):
                    end = rows[i + self.size]["t"] if i + self.size < len(rows) else INF
                    out.append((e, e["t"], end))
        else:
            for e in events:
                t = e["t"]
                if self.kind == "range":
                    out.append((e, t, t + self.size))
                elif self.kind == "slide":
                    s = self.slide
                    out.append((e, _ceil(t, s), _ceil(t + self.size, s)))
                elif self.kind == "now":
                    out.append((e, t, t + 1))
                elif self.kind == "unbounded":
                    out.append((e, t, INF))
                elif self.kind == "cut":
                    cut = (t // self.size + 1) * self.size
                    out.append((e, cut, cut + self.size * max(self.slide, 1)))
        return [(tuple(e[c] for c in columns), ts, te) for e, ts, te in out if ts < te]


    def keyed_elements(self, events: list[Event], columns: tuple[str, ...]) -> list[Element]:
        """A keyed stream's rows: each valid from its time until the next row or delete of
        its key, in (t, deletes first, values) order; a delete is no element.
        """
        keys: dict[tuple, list[Event]] = {}
        order = sorted(events, key=lambda e: (e["t"], not e.get("del", False),
                                              *[e[c] for c in ("ex", "k", "v", "t")]))
        for e in order:
            keys.setdefault(tuple(e[c] for c in self.partition), []).append(e)
        out = []
        for rows in keys.values():
            for i, e in enumerate(rows):
                if not e.get("del", False):
                    end = rows[i + 1]["t"] if i + 1 < len(rows) else INF
                    out.append((tuple(e[c] for c in columns), e["t"], end))
        return [x for x in out if x[1] < x[2]]

    def session_elements(self, events: list[Event], columns: tuple[str, ...]) -> list[Element]:
        """Sessions: a partition's events in time order, a new session where one comes more
        than the gap after the one before; each event lives until the gap after its
        session's last event."""
        parts: dict[tuple, list[Event]] = {}
        for e in sorted(events, key=lambda e: e["t"]):
            parts.setdefault(tuple(e[c] for c in self.partition), []).append(e)
        out = []
        for rows in parts.values():
            sessions: list[list[Event]] = []
            for e in rows:
                if sessions and e["t"] - sessions[-1][-1]["t"] <= self.size:
                    sessions[-1].append(e)
                else:
                    sessions.append([e])
            for session in sessions:
                end = session[-1]["t"] + self.size
                out += [(tuple(e[c] for c in columns), e["t"], end) for e in session]
        return out

    def chunk_elements(self, events: list[Event], columns: tuple[str, ...]) -> list[Element]:
        """Count or key chunks in (t, values) order: chunk j's rows are valid from the first
        row of chunk j + 1 until the first row of chunk j + 1 + m. Every
        scenario ends its streams: the last chunk is complete, as if the next chunk began
        where the stream ended: one unit after its last row, or at the watermark it had
        reached if later."""
        rows = sorted(events, key=lambda e: (e["t"], *[e[c] for c in columns]))
        chunk: list[int] = []
        for i, e in enumerate(rows):
            if self.kind == "cutrows":
                chunk.append(i // self.size)
            else:
                key = tuple(e[c] for c in self.partition)
                same = i > 0 and key == tuple(rows[i - 1][c] for c in self.partition)
                chunk.append(chunk[-1] if same else (chunk[-1] + 1 if chunk else 0))
        starts: dict[int, float] = {}
        for e, c in zip(rows, chunk, strict=True):
            starts.setdefault(c, e["t"])
        if rows:
            starts[chunk[-1] + 1] = max(rows[-1]["t"] + 1, ended_at(events))
        m = max(self.slide, 1)
        out = [(tuple(e[c] for c in columns), starts.get(j + 1, INF), starts.get(j + 1 + m, INF))
               for e, j in zip(rows, chunk, strict=True)]
        return [x for x in out if x[1] < x[2]]


def _ceil(t: int, step: int) -> int:
    return -((-t) // step) * step


# -- relations: elements with their intervals ------------------------------------------------
@dataclass(frozen=True)
class Relation:
    """A time-varying bag of rows as elements ``(values, ts, te)`` over named columns."""

    columns: tuple[str, ...]
    elements: tuple[Element, ...]

    def rows(self) -> Iterable[tuple[dict, float, float]]:
        for values, ts, te in self.elements:
            yield dict(zip(self.columns, values, strict=True)), ts, te

    def where(self, keep: Callable[[dict], bool]) -> Relation:
        return Relation(self.columns, tuple(
            e for e in self.elements if keep(dict(zip(self.columns, e[0], strict=True)))))

    def select(self, columns: tuple[str, ...], make: Callable[[dict], tuple]) -> Relation:
        return Relation(columns, tuple((make(r), ts, te) for r, ts, te in self.rows()))

    def clip(self, start: float) -> Relation:
        """The relation as a query started at ``start`` sees it: from ``start`` on."""
        return Relation(self.columns, tuple((v, max(ts, start), te)
                                            for v, ts, te in self.elements if te > start))


def window(events: list[Event], win: Win, columns: tuple[str, ...] = ("ex", "k", "v", "t")
           ) -> Relation:
    """Stream to relation."""
    return Relation(columns, tuple(win.elements(events, columns)))


def join(left: Relation, right: Relation, key: Callable[[dict], object],
         theta: Callable[[dict, dict], bool] | None, columns: tuple[str, ...],
         make: Callable[[dict, dict], tuple]) -> Relation:
    """Inner join: a pair lives where both elements do; ``key`` buckets equi-join keys."""
    buckets: dict[object, list[tuple[dict, float, float]]] = {}
    for r in right.rows():
        buckets.setdefault(key(r[0]), []).append(r)
    out = []
    for a, ats, ate in left.rows():
        for b, bts, bte in buckets.get(key(a), ()):
            if theta is not None and not theta(a, b):
                continue
            ts, te = max(ats, bts), min(ate, bte)
            if ts < te:
                out.append((make(a, b), ts, te))
    return Relation(columns, tuple(out))


def union(*inputs: Relation) -> Relation:
    """UNION ALL: the bag union, columns named by the first input."""
    return Relation(inputs[0].columns, tuple(e for r in inputs for e in r.elements))


def snapshots(elements: Iterable[Element]) -> list[tuple[float, list]]:
    """The critical instants (every start and end) with the snapshot from each on."""
    elements = list(elements)
    instants = sorted({x[1] for x in elements} | {x[2] for x in elements if x[2] < INF})
    by_start = sorted(elements, key=lambda x: x[1])
    out, live, i = [], [], 0
    for c in instants:
        while i < len(by_start) and by_start[i][1] <= c:
            live.append(by_start[i])
            i += 1
        live = [x for x in live if x[2] > c]
        out.append((c, [x[0] for x in live]))
    return out


def aggregate(rel: Relation, keys: tuple[str, ...],
              calls: list[tuple[str, Callable[[list[dict]], object]]],
              having: Callable[[list[dict]], bool] | None = None) -> Relation:
    """GROUP BY ``keys`` on every snapshot; a group exists while it has rows."""
    series = []
    for c, snap in snapshots(rel.elements):
        groups: dict[tuple, list[dict]] = {}
        for values in snap:
            row = dict(zip(rel.columns, values, strict=True))
            groups.setdefault(tuple(row[k] for k in keys), []).append(row)
        series.append((c, [(*key, *[f(rows) for _, f in calls]) for key, rows in groups.items()
                           if having is None or having(rows)]))
    return Relation((*keys, *[n for n, _ in calls]), tuple(coalesce(series, closed=False)))


def per_snapshot(inputs: list[Relation], columns: tuple[str, ...],
                 f: Callable[[list[list[dict]]], list[tuple]]) -> Relation:
    """The relation whose snapshot at every instant is ``f`` of the inputs' snapshots
    there (each a bag of rows as dicts): the contract's definition of any operator.
    """
    instants = sorted({x for r in inputs for _, ts, te in r.elements for x in (ts, te)
                       if x < INF})
    series = []
    for c in instants:
        snaps = [[dict(zip(r.columns, v, strict=True)) for v, ts, te in r.elements
                  if ts <= c < te] for r in inputs]
        series.append((c, f(snaps)))
    return Relation(columns, tuple(coalesce(series, closed=False)))


def outer_join(left: Relation, right: Relation, how: str,
               match: Callable[[dict, dict], bool], columns: tuple[str, ...],
               make: Callable[[dict | None, dict | None], tuple]) -> Relation:
    """INNER, LEFT, RIGHT, FULL, SEMI or ANTI join on every snapshot; ``make`` builds an
    output row from a pair, or from one side and None for a row kept without a partner
    (SEMI and ANTI give the left row: ``make(a, None)``).
    """
    def joined(snaps: list[list[dict]]) -> list[tuple]:
        rows_l, rows_r = snaps
        if how in ("SEMI", "ANTI"):
            return [make(a, None) for a in rows_l
                    if any(match(a, b) for b in rows_r) == (how == "SEMI")]
        out = [make(a, b) for a in rows_l for b in rows_r if match(a, b)]
        if how in ("LEFT", "FULL"):
            out += [make(a, None) for a in rows_l if not any(match(a, b) for b in rows_r)]
        if how in ("RIGHT", "FULL"):
            out += [make(None, b) for b in rows_r if not any(match(a, b) for a in rows_l)]
        return out

    return per_snapshot([left, right], columns, joined)


# -- relation -> output ----------------------------------------------------------------------
def coalesce(series: list[tuple[float, list]], closed: bool = True) -> list[tuple]:
    """Canonical coalescing: layer k of a value spans where it occurs at least k times.

    ``closed``: the elements as output records, ``te`` None when never closed; else as
    elements with ``te`` = INF.
    """
    out = []
    open_at: dict[tuple, float] = {}
    prev: Counter = Counter()
    for c, snap in [*series, (INF, [])]:
        now = Counter(snap)
        for row in set(prev) | set(now):
            for layer in range(now[row] + 1, prev[row] + 1):
                out.append((row, open_at.pop((row, layer)), c))
            for layer in range(prev[row] + 1, now[row] + 1):
                open_at[(row, layer)] = c
        prev = now
    if not closed:
        return out
    return sorted(((r, ts, None if te == INF else te) for r, ts, te in out), key=_key)


def why_not_whole_elements(records: list[tuple], elements: Iterable[Element]) -> str | None:
    """Why interval ``records`` (row, ts, te | None) are not what some of ``elements`` give,
    coalesced (None: they are), as a join that sheds must emit (``docs/shedding.md``,
    "What a shed join emits").

    At every instant the rows the records hold are a sub-bag of the rows the elements hold,
    and a row's count changes only where an element of that row starts or ends: the
    records never hold a row the elements do not, nor cut an element's interval.
    """
    elements = list(elements)
    spans = [(row, ts, INF if te is None else te) for row, ts, te in records]
    edges: dict[tuple, set[float]] = {}
    for row, ts, te in elements:
        edges.setdefault(row, set()).update((ts, te))
    instants = sorted({x for _, ts, te in [*spans, *elements] for x in (ts, te) if x < INF})
    before: Counter = Counter()
    for c in instants:
        held = Counter(row for row, ts, te in spans if ts <= c < te)
        given = Counter(row for row, ts, te in elements if ts <= c < te)
        if held - given:
            return f"at {c} the records hold {dict(held - given)} beyond the elements"
        for row in set(held) | set(before):
            if held[row] != before[row] and c not in edges.get(row, ()):
                return f"{row} changes at {c}, where no element of it starts or ends"
        before = held
    return None


def output(rel: Relation, form: str, period: int | None = None) -> list[tuple]:
    """The records a sink receives for relation ``rel`` in output form ``form``.

    Intervals (``""``): (row, ts, te | None); ISTREAM / DSTREAM / RSTREAM: (row, instant);
    CHANGELOG: (row, instant, '+' | '-'), one per copy.
    """
    series = snapshots(rel.elements)
    if form == "":
        return coalesce(series)
    out: list[tuple] = []
    prev: Counter = Counter()
    last_change = series[-1][0] if series else None
    for i, (c, snap) in enumerate(series):
        now = Counter(snap)
        if form in ("ISTREAM", "DSTREAM"):
            a, b = (now, prev) if form == "ISTREAM" else (prev, now)
            for row, n in (a - b).items():
                out += [(row, c)] * n
        elif form == "CHANGELOG":
            for row in set(now) | set(prev):
                diff = now[row] - prev[row]
                out += [(row, c, "+" if diff > 0 else "-")] * abs(diff)
        elif form == "RSTREAM" and period is None and now != prev:
            out += [(row, c) for row, n in now.items() for _ in range(n)]
        elif form == "RSTREAM" and period is not None:
            end = series[i + 1][0] if i + 1 < len(series) else c
            assert last_change is not None
            end = min(end, last_change)
            for m in range(_ceil(int(c), period), int(end), period):
                out += [(row, m) for row, n in now.items() for _ in range(n)]
        prev = now
    return sorted(out, key=_key)


def _key(x: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v) if not isinstance(v, tuple) else _key(v)
                 for v in x)


def stream_output(events: list[Event], columns: tuple[str, ...],
                  make: Callable[[Event], tuple | None]) -> list[tuple]:
    """Instants of a stream query: (row, t) for every event ``make`` keeps (not None)."""
    out = []
    for e in events:
        row = make(e)
        if row is not None:
            out.append((row, e["t"]))
    return sorted(out, key=_key)


# -- aggregates ------------------------------------------------------------------------------
def _values(rows: list[dict], arg: Callable[[dict], object]) -> list:
    return [x for x in (arg(r) for r in rows) if x is not None]


def _avg(xs: list) -> float | None:
    return float(Fraction(sum(xs), len(xs))) if xs else None


def _spread(measure: Callable[[list], float], xs: list, least: int) -> float | None:
    """A variance or standard deviation of ``xs``, None for fewer than ``least`` values."""
    return float(measure(xs)) if len(xs) >= least else None


def _nullif4(r: dict) -> int | None:
    return None if r["v"] == 4 else r["v"]


#: built-in aggregate calls by the SQL the engine gets, with their meaning over a group's
#: rows (SQL: NULL arguments are skipped; an aggregate of no values is NULL, count is 0)
AGGS: dict[str, Callable[[list[dict]], object]] = {
    "count(*)": len,
    "count(nullif(v, 4))": lambda rows: len(_values(rows, _nullif4)),
    "sum(v)": lambda rows: sum(_values(rows, lambda r: r["v"])),
    "avg(v)": lambda rows: _avg(_values(rows, lambda r: r["v"])),
    "min(v)": lambda rows: min(_values(rows, lambda r: r["v"])),
    "max(v)": lambda rows: max(_values(rows, lambda r: r["v"])),
    "count(DISTINCT v)": lambda rows: len(set(_values(rows, lambda r: r["v"]))),
    # other arguments, some NULL: min and max of several arguments share one multiset
    "min(9 - v)": lambda rows: min(_values(rows, lambda r: 9 - r["v"])),
    "max(nullif(v, 4))": lambda rows: max(_values(rows, _nullif4), default=None),
    "sum(nullif(v, 4))": lambda rows: sum(_values(rows, _nullif4)) if _values(rows, _nullif4)
    else None,
    "avg(v * 2 + 1)": lambda rows: _avg(_values(rows, lambda r: r["v"] * 2 + 1)),
    "count(DISTINCT v % 3)": lambda rows: len(set(_values(rows, lambda r: r["v"] % 3))),
    # made of counts and sums (sparkcq/model/aggregate_functions.py), here by the exact
    # rational arithmetic of Python's statistics module
    "var_samp(v)": lambda rows: _spread(statistics.variance, _values(rows, lambda r: r["v"]), 2),
    "stddev_samp(nullif(v, 4))": lambda rows: _spread(statistics.stdev,
                                                      _values(rows, _nullif4), 2),
    "var_pop(v * 3)": lambda rows: _spread(statistics.pvariance,
                                           _values(rows, lambda r: r["v"] * 3), 1),
    "stddev_pop(v)": lambda rows: _spread(statistics.pstdev, _values(rows, lambda r: r["v"]), 1),
}


def _median(vs: list) -> float | None:
    xs = sorted(vs)
    n = len(xs)
    if not n:
        return None
    return float(xs[n // 2]) if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _percentile(vs: list, p: float) -> float | None:
    xs = sorted(float(v) for v in vs)
    if not xs:
        return None
    rank = p * (len(xs) - 1)
    lo = int(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def _mode(vs: list) -> int | None:
    counts = Counter(vs)
    top = max(counts.values(), default=0)
    return min((v for v, n in counts.items() if n == top), default=None)


def _of_v(f: Callable[[list], object]) -> Callable[[list[dict]], object]:
    return lambda rows: f([r["v"] for r in rows])


#: user aggregates (tests/udas.py and sparkcq.aggregates.library) by the call the engine
#: gets, with their meaning over a group's rows; ``UDA_DEFINITIONS`` creates them
#: the built-in aggregates of AGGS the StreamAPAS language has, as it writes them
APAS_AGGS = {"count(*)": "agg.count()", "sum(v)": "agg.sum(${s}.v)", "avg(v)": "agg.avg(${s}.v)",
             "min(v)": "agg.min(${s}.v)", "max(v)": "agg.max(${s}.v)",
             "min(9 - v)": "agg.min(9 - ${s}.v)", "var_samp(v)": "agg.var_samp(${s}.v)",
             "stddev_pop(v)": "agg.stddev_pop(${s}.v)"}

UDAS: dict[str, Callable[[list[dict]], object]] = {
    "usum(v)": _of_v(lambda vs: sum(vs) if vs else None),
    "uavg(v)": _of_v(lambda vs: float(Fraction(sum(vs), len(vs))) if vs else None),
    "umin(v)": _of_v(lambda vs: min(vs, default=None)),
    "umax(v)": _of_v(lambda vs: max(vs, default=None)),
    "umax(nullif(v, 4))": lambda rows: max(_values(rows, _nullif4), default=None),
    "median(v)": _of_v(_median),
    "pct(v, 0.25)": _of_v(lambda vs: _percentile(vs, 0.25)),
    "mode(v)": _of_v(_mode),
    "ndistinct(v % 4)": _of_v(lambda vs: len({v % 4 for v in vs})),
}
UDA_DEFINITIONS = """
CREATE AGGREGATE usum(x BIGINT) RETURNS BIGINT USING 'udas:USum';
CREATE AGGREGATE uavg(x BIGINT) RETURNS DOUBLE USING 'udas:UAvg';
CREATE AGGREGATE umin(x BIGINT) RETURNS BIGINT USING 'udas:UMin';
CREATE AGGREGATE umax(x BIGINT) RETURNS BIGINT USING 'udas:UMax';
CREATE AGGREGATE median(x DOUBLE) RETURNS DOUBLE USING 'sparkcq.aggregates.library:Median';
CREATE AGGREGATE pct(x DOUBLE, p DOUBLE) RETURNS DOUBLE
    USING 'sparkcq.aggregates.library:Percentile';
CREATE AGGREGATE mode(x BIGINT) RETURNS BIGINT USING 'sparkcq.aggregates.library:Mode';
CREATE AGGREGATE ndistinct(x BIGINT) RETURNS BIGINT
    USING 'sparkcq.aggregates.library:CountDistinct';
"""


# -- query shapes ----------------------------------------------------------------------------
Inputs = dict[str, list[Event]]  # accepted events by stream name


class Shape:
    """A query: its SQL, the stream it starts from, and its records over given inputs."""

    #: the form of its records: "intervals", "instants" or "changelog"
    records_kind = "intervals"

    def sql(self) -> str:
        raise NotImplementedError

    def apas(self) -> str | None:
        """The query in the StreamAPAS language, if it has one."""
        return None

    def setup(self) -> str:
        """Statements the query needs first (derived streams), or ''."""
        return ""

    def options(self) -> str:
        """The query's ``WITH (...)`` clause, or ''."""
        return ""

    def tables(self) -> dict[str, list[dict]]:
        """The tables the query reads, by name, as rows."""
        return {}

    def features(self) -> set[str]:
        """What of the dialect the query exercises (for the count of cases per feature)."""
        if self.records_kind == "instants" and not self.form:
            return set()  # a stream query: instants
        return {f"output {self.form or 'intervals'}"}

    def relation(self, inputs: Inputs) -> Relation:
        raise NotImplementedError

    @property
    def form(self) -> str:
        return ""

    @property
    def period(self) -> int | None:
        return None

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        """The query's records; a query started at ``start`` above a ``shared`` relation sees
        it from ``start`` on, otherwise only the events from ``start`` on.
        """
        if start is not None and not shared:
            inputs = {s: StreamEvents((e for e in evs if e["t"] >= start), ended_at(evs))
                      for s, evs in inputs.items()}
        rel = self.relation(inputs)
        if start is not None and shared:
            rel = rel.clip(start)
        return output(rel, self.form, self.period)


def _records_kind(form: str) -> str:
    return {"": "intervals", "CHANGELOG": "changelog"}.get(form, "instants")


def join_period(left: Win, right: Win) -> int | None:
    """RSTREAM's period over a join: the inputs' one period, if they have exactly one."""
    periods = {p for p in (left.period, right.period) if p}
    return periods.pop() if len(periods) == 1 else None


class WindowedAggregate(Shape):
    """An aggregate over a window in any output form (``agg_form``)."""

    win: Win
    agg_form: str

    @property
    def form(self) -> str:
        return self.agg_form

    @property
    def period(self) -> int | None:
        return self.win.period

    @property
    def records_kind(self) -> str:  # type: ignore[override]
        return _records_kind(self.agg_form)


def grouped_sql(aggs: tuple[str, ...], where: int | None,
                having: int | None) -> tuple[str, str, str]:
    """The SELECT items ``aggs AS a0, ...``, `` WHERE v > w`` and `` HAVING count(*) > h``
    of the aggregate shapes (empty when not drawn).
    """
    cols = ", ".join(f"{a} AS a{i}" for i, a in enumerate(aggs))
    return (cols, f" WHERE v > {where}" if where is not None else "",
            f" HAVING count(*) > {having}" if having is not None else "")


@dataclass(frozen=True)
class AggQuery(WindowedAggregate):
    """[form] SELECT ex[, k], aggs FROM s [win] [WHERE v > w] GROUP BY ex[, k]
    [HAVING count(*) > h]."""

    win: Win
    aggs: tuple[str, ...]
    grouped: bool = True
    where: int | None = None
    having: int | None = None
    agg_form: str = ""
    stream: str = "s"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("ex", "k") if self.grouped else ("ex",)

    def sql(self) -> str:
        keys = ", ".join(self.keys)
        cols, where, having = grouped_sql(self.aggs, self.where, self.having)
        return (f"{self.agg_form} SELECT {keys}, {cols} FROM {self.stream} {self.win.sql()}"
                f"{where} GROUP BY {keys}{having}").strip()

    def apas(self) -> str | None:
        s = self.stream
        window = self.win.apas(s)
        if self.agg_form or window is None or any(a not in APAS_AGGS for a in self.aggs):
            return None
        where = " and ".join([window, *([f"${s}.v > {self.where}"] if self.where is not None
                                        else [])])
        keys = [f"{k} = ${s}.{k}" for k in self.keys]
        calls = [f"a{i} = {APAS_AGGS[a].format(s=s)}" for i, a in enumerate(self.aggs)]
        if self.having is None:
            return f"where {where} select o[{', '.join(keys + calls)}];\nselect [$o[T]]"
        out = [f"{k} = $o.{k}" for k in self.keys] + [f"a{i} = $o.a{i}"
                                                      for i in range(len(self.aggs))]
        return (f"where {where} select o[{', '.join([*keys, *calls, 'n = agg.count()'])}];\n"
                f"where $o.n > {self.having} select p[{', '.join(out)}];\nselect [$p[T]]")

    def features(self) -> set[str]:
        out = super().features() | {f"window {self.win.name}", "GROUP BY"}
        out |= {f"aggregate {a}" if a in AGGS else f"user aggregate {a}" for a in self.aggs}
        out |= {"WHERE"} if self.where is not None else set()
        return out | ({"HAVING"} if self.having is not None else set())

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(inputs[self.stream], self.win)
        if self.where is not None:
            rel = rel.where(lambda r: r["v"] > self.where)
        calls = [(f"a{i}", (AGGS | UDAS)[a]) for i, a in enumerate(self.aggs)]
        having = (None if self.having is None else lambda rows: len(rows) > self.having)
        return aggregate(rel, self.keys, calls, having)


@dataclass(frozen=True)
class WindowFunctionQuery(Shape):
    """SELECT ex[, k], aggs, window_start, window_end FROM TABLE(<kind>(TABLE s,
    DESCRIPTOR(t), ...)) [WHERE v > w] GROUP BY window_start, window_end, ex[, k]
    [HAVING count(*) > h]: Flink's window table functions, computed here from Flink's own
    definition (an event at t lies in every window [start, end) with start <= t < end; one
    row per group and window that holds rows, at its end), not from sparkcq's windows.
    """

    kind: str  # TUMBLE, HOP, CUMULATE or SESSION
    step: int  # TUMBLE: the size; SESSION: the gap, as ``size``
    size: int
    aggs: tuple[str, ...]
    grouped: bool = True
    where: int | None = None
    having: int | None = None
    stream: str = "s"
    # written as Spark's GROUP BY window(t, size, slide) or session_window(t, gap)
    spark: bool = False
    records_kind = "instants"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("ex", "k") if self.grouped else ("ex",)

    def sql(self) -> str:
        keys = ", ".join(self.keys)
        cols, where, having = grouped_sql(self.aggs, self.where, self.having)
        lengths = (str(self.size) if self.kind in ("TUMBLE", "SESSION")
                   else f"{self.step}, {self.size}")
        if self.spark:
            call, name = ((f"session_window(t, {self.size})", "session_window")
                          if self.kind == "SESSION"
                          else (f"window(t, {self.size}, {self.step})", "window"))
            return (f"SELECT {keys}, {cols}, {name}.start AS window_start, {name}.end AS "
                    f"window_end FROM {self.stream}{where} GROUP BY {call}, {keys}{having}")
        partition = f" PARTITION BY ({keys})" if self.kind == "SESSION" else ""
        return (f"SELECT {keys}, {cols}, window_start, window_end FROM TABLE({self.kind}("
                f"TABLE {self.stream}{partition}, DESCRIPTOR(t), {lengths})){where} "
                f"GROUP BY window_start, window_end, {keys}{having}")

    def sessions(self, events: list[dict]) -> list[tuple[int, int, list[dict]]]:
        """Sessions per the keys: in time order, an event at most ``size`` (the gap) after
        the one before continues a session; each [first, last + gap) with its events.
        """
        parts: dict[tuple, list[dict]] = {}
        for e in sorted(events, key=lambda e: e["t"]):
            parts.setdefault(tuple(e[k] for k in self.keys), []).append(e)
        out = []
        for rows in parts.values():
            current = [rows[0]]
            for e in rows[1:]:
                if e["t"] - current[-1]["t"] <= self.size:
                    current.append(e)
                else:
                    out.append((current[0]["t"], current[-1]["t"] + self.size, current))
                    current = [e]
            out.append((current[0]["t"], current[-1]["t"] + self.size, current))
        return out

    def windows_of(self, t: int) -> list[tuple[int, int]]:
        """The windows [start, end) that hold an event at ``t``."""
        if self.kind == "CUMULATE":
            base = t - t % self.size
            return [(base, base + j * self.step) for j in range(1, self.size // self.step + 1)
                    if base + j * self.step > t]
        first = t - t % self.step - self.size + self.step
        return [(w, w + self.size) for w in range(first, t + 1, self.step)]

    def features(self) -> set[str]:
        out = {f"window function {'window()' if self.spark else self.kind}", "GROUP BY"}
        out |= {f"aggregate {a}" for a in self.aggs}
        out |= {"WHERE"} if self.where is not None else set()
        return out | ({"HAVING"} if self.having is not None else set())

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        assert start is None, "a window function query runs from the start"
        groups: dict[tuple, list[dict]] = {}
        if self.kind == "SESSION":  # no WHERE: sessions are made of every row
            for begin, end, rows in self.sessions(list(inputs[self.stream])):
                groups[(begin, end, *[rows[0][k] for k in self.keys])] = rows
        for e in inputs[self.stream] if self.kind != "SESSION" else []:
            if self.where is not None and not e["v"] > self.where:
                continue
            for w in self.windows_of(e["t"]):
                groups.setdefault((*w, *[e[k] for k in self.keys]), []).append(e)
        out = []
        for (begin, end, *key), rows in groups.items():
            if self.having is not None and not len(rows) > self.having:
                continue
            values = tuple(AGGS[a](rows) for a in self.aggs)
            out.append(((*key, *values, begin, end), end))
        return out


#: the aggregates an OVER window computes (count, sum and avg: ``plan/bind_over.py``)
OVER_AGGS = ("count(*)", "count(nullif(v, 4))", "sum(v)", "avg(v)", "sum(nullif(v, 4))",
             "avg(v * 2 + 1)")


@dataclass(frozen=True)
class OverQuery(Shape):
    """SELECT ex, k, v, t, aggs OVER (PARTITION BY ex[, k] ORDER BY t RANGE BETWEEN
    ``preceding`` PRECEDING AND CURRENT ROW) FROM s [WHERE v > w]: each event once, at its
    instant, with the aggregates of its partition's events in [t - preceding, t] (all those
    at t too), computed from that definition rather than from sparkcq's windows.
    """

    preceding: int
    aggs: tuple[str, ...]
    grouped: bool = True
    where: int | None = None
    stream: str = "s"
    records_kind = "instants"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("ex", "k") if self.grouped else ("ex",)

    def sql(self) -> str:
        over = (f"OVER (PARTITION BY {', '.join(self.keys)} ORDER BY t RANGE BETWEEN "
                f"{self.preceding} PRECEDING AND CURRENT ROW)")
        cols = ", ".join(f"{a} {over} AS a{i}" for i, a in enumerate(self.aggs))
        where = f" WHERE v > {self.where}" if self.where is not None else ""
        return f"SELECT ex, k, v, t, {cols} FROM {self.stream}{where}"

    def features(self) -> set[str]:
        out = {"OVER window"} | {f"aggregate {a}" for a in self.aggs}
        return out | ({"WHERE"} if self.where is not None else set())

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        events = [e for e in inputs[self.stream]
                  if (start is None or e["t"] >= start)
                  and (self.where is None or e["v"] > self.where)]
        out = []
        for e in events:
            key = tuple(e[k] for k in self.keys)
            rows = [r for r in events if tuple(r[k] for k in self.keys) == key
                    and e["t"] - self.preceding <= r["t"] <= e["t"]]
            values = tuple(AGGS[a](rows) for a in self.aggs)
            out.append(((e["ex"], e["k"], e["v"], e["t"], *values), e["t"]))
        return out


#: the table TableAggQuery joins, k -> g: x twice under p (a duplicate row counts twice)
TABLE_H = (("x", "p"), ("x", "p"), ("x", "q"), ("y", "q"))


@dataclass(frozen=True)
class TableAggQuery(WindowedAggregate):
    """[form] SELECT s.ex, h.g[, s.k], aggs FROM s [win] JOIN h ON s.k = h.k [WHERE v > w]
    GROUP BY s.ex, h.g[, s.k]: an aggregate of a windowed stream joined with a table."""

    win: Win
    aggs: tuple[str, ...]
    by_key: bool = False
    where: int | None = None
    agg_form: str = ""

    def tables(self) -> dict[str, list[dict]]:
        return {"h": [{"k": k, "g": g} for k, g in TABLE_H]}

    def sql(self) -> str:
        keys = ["s.ex", "h.g", *(["s.k"] if self.by_key else [])]
        cols = ", ".join(f"{a} AS a{i}" for i, a in enumerate(self.aggs))
        where = f" WHERE v > {self.where}" if self.where is not None else ""
        return (f"{self.agg_form} SELECT {', '.join(f'{k} AS {k[2:]}' for k in keys)}, {cols} "
                f"FROM s {self.win.sql()} JOIN h ON s.k = h.k{where} "
                f"GROUP BY {', '.join(keys)}").strip()

    def features(self) -> set[str]:
        out = super().features() | {f"window {self.win.name}", "GROUP BY", "join with a table"}
        out |= {f"aggregate {a}" for a in self.aggs}
        return out | ({"WHERE"} if self.where is not None else set())

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(inputs["s"], self.win)
        if self.where is not None:
            rel = rel.where(lambda r: r["v"] > self.where)
        table = Relation(("k", "g"), tuple(((k, g), -INF, INF) for k, g in TABLE_H))
        joined = join(rel, table, key=lambda r: r["k"], theta=None,
                      columns=("ex", "k", "v", "t", "g"),
                      make=lambda a, b: (a["ex"], a["k"], a["v"], a["t"], b["g"]))
        keys = ("ex", "g", "k") if self.by_key else ("ex", "g")
        return aggregate(joined, keys, [(f"a{i}", AGGS[a]) for i, a in enumerate(self.aggs)])


@dataclass(frozen=True)
class ProjectQuery(Shape):
    """[form] SELECT ex, k, v * 2 + 1 AS w, v % 3 = 0 AS m FROM s [win] WHERE v > w."""

    win: Win
    where: int
    proj_form: str = ""
    stream: str = "s"

    @property
    def form(self) -> str:
        return self.proj_form

    @property
    def period(self) -> int | None:
        return self.win.period

    @property
    def records_kind(self) -> str:  # type: ignore[override]
        return _records_kind(self.proj_form)

    def sql(self) -> str:
        return (f"{self.proj_form} SELECT ex, k, v * 2 + 1 AS w, v % 3 = 0 AS m FROM "
                f"{self.stream} {self.win.sql()} WHERE v > {self.where}").strip()

    def features(self) -> set[str]:
        return super().features() | {f"window {self.win.name}", "projection", "WHERE"}

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(inputs[self.stream], self.win).where(lambda r: r["v"] > self.where)
        return rel.select(("ex", "k", "w", "m"),
                          lambda r: (r["ex"], r["k"], r["v"] * 2 + 1, r["v"] % 3 == 0))


class JoinShape(Shape):
    """A join of two windowed streams in any output form (``join_form``)."""

    left: Win
    right: Win
    join_form: str

    @property
    def form(self) -> str:
        return self.join_form

    @property
    def period(self) -> int | None:
        return join_period(self.left, self.right)

    @property
    def records_kind(self) -> str:  # type: ignore[override]
        return _records_kind(self.join_form)


@dataclass(frozen=True)
class JoinQuery(JoinShape):
    """SELECT a.ex, a.k, a.v, b.v FROM s [w1] a JOIN s2 [w2] b ON ex, k [AND a.v < b.v]."""

    left: Win
    right: Win
    theta: bool
    streams: tuple[str, str] = ("s", "s2")
    join_form: str = ""
    shedding: str = ""  # options of a join that sheds (at z = 1 it gives every pair)

    def options(self) -> str:
        return f"WITH ({self.shedding})" if self.shedding else ""

    def sql(self) -> str:
        theta = " AND a.v < b.v" if self.theta else ""
        left, right = self.streams
        return (f"{self.join_form} SELECT a.ex AS ex, a.k AS k, a.v AS av, b.v AS bv FROM "
                f"{left} {self.left.sql()} AS a JOIN {right} {self.right.sql()} AS b "
                f"ON a.ex = b.ex AND a.k = b.k{theta}").strip()

    def apas(self) -> str | None:
        left, right = self.streams
        wins = [self.left.apas(left), self.right.apas(right)]
        if self.join_form or self.shedding or left == right or None in wins:
            return None
        conds = [*wins, f"${left}.ex == ${right}.ex", f"${left}.k == ${right}.k",
                 *([f"${left}.v < ${right}.v"] if self.theta else [])]
        return (f"where {' and '.join(conds)} select j[ex = ${left}.ex, k = ${left}.k, "  # type: ignore[arg-type]
                f"av = ${left}.v, bv = ${right}.v];\nselect [$j[T]]")

    def features(self) -> set[str]:
        kind = "theta join" if self.theta else "equi join"
        self_join = {"self join"} if self.streams[0] == self.streams[1] else set()
        at_one = "throttle='1'" in self.shedding
        shed = {f"shedding join {'at' if at_one else 'below'} z = 1"} if self.shedding else set()
        return super().features() | self_join | shed | {kind, f"window {self.left.name}",
                                                        f"window {self.right.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        left, right = self.streams
        return join(window(inputs[left], self.left), window(inputs[right], self.right),
                    key=lambda r: (r["ex"], r["k"]),
                    theta=(lambda a, b: a["v"] < b["v"]) if self.theta else None,
                    columns=("ex", "k", "av", "bv"),
                    make=lambda a, b: (a["ex"], a["k"], a["v"], b["v"]))


@dataclass(frozen=True)
class ThreeWayJoinQuery(JoinShape):
    """SELECT a.ex, a.k, a.v, b.v, c.v FROM s [w1] a JOIN s2 [w2] b ON ex, k JOIN s [w3] c
    ON ex, k [AND b.v < c.v]: the pairs of the first join joined with a third windowed
    stream (a join of its pairs, which may shed too)."""

    left: Win
    right: Win
    third: Win
    theta: bool
    join_form: str = ""
    shedding: str = ""

    def options(self) -> str:
        return f"WITH ({self.shedding})" if self.shedding else ""

    @property
    def period(self) -> int | None:
        """RSTREAM's period: the three windows' one period, if they have exactly one."""
        periods = {p for p in (self.left.period, self.right.period, self.third.period) if p}
        return periods.pop() if len(periods) == 1 else None

    def sql(self) -> str:
        theta = " AND b.v < c.v" if self.theta else ""
        return (f"{self.join_form} SELECT a.ex AS ex, a.k AS k, a.v AS av, b.v AS bv, "
                f"c.v AS cv FROM s {self.left.sql()} AS a JOIN s2 {self.right.sql()} AS b "
                f"ON a.ex = b.ex AND a.k = b.k JOIN s {self.third.sql()} AS c "
                f"ON b.ex = c.ex AND b.k = c.k{theta}").strip()

    def features(self) -> set[str]:
        at_one = "throttle='1'" in self.shedding
        shed = {f"three-way join shedding {'at' if at_one else 'below'} z = 1"} \
            if self.shedding else set()
        return super().features() | shed | {"three way join", f"window {self.third.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        pairs = join(window(inputs["s"], self.left), window(inputs["s2"], self.right),
                     key=lambda r: (r["ex"], r["k"]), theta=None,
                     columns=("ex", "k", "av", "bv"),
                     make=lambda a, b: (a["ex"], a["k"], a["v"], b["v"]))
        return join(pairs, window(inputs["s"], self.third),
                    key=lambda r: (r["ex"], r["k"]),
                    theta=(lambda p, c: p["bv"] < c["v"]) if self.theta else None,
                    columns=("ex", "k", "av", "bv", "cv"),
                    make=lambda p, c: (p["ex"], p["k"], p["av"], p["bv"], c["v"]))


@dataclass(frozen=True)
class OuterJoinQuery(JoinShape):
    """SELECT coalesce(a.ex, b.ex) AS ex, a.k, a.v, b.k, b.v FROM s [w1] a {LEFT | RIGHT |
    FULL} JOIN s2 [w2] b ON ex, k [AND a.v < b.v] [WHERE the sides' v do not sum to 9];
    SEMI and ANTI: SELECT ex, k, v FROM s [w1] a LEFT {SEMI | ANTI} JOIN s2 [w2] b ON ...
    """

    left: Win
    right: Win
    how: str
    theta: bool
    where: bool = False
    streams: tuple[str, str] = ("s", "s2")
    join_form: str = ""

    def sql(self) -> str:
        theta = " AND a.v < b.v" if self.theta else ""
        left, right = self.streams
        if self.how in ("SEMI", "ANTI"):
            cols, join = "ex, k, v", f"LEFT {self.how} JOIN"
            where = " WHERE v <> 9" if self.where else ""
        else:
            cols = "coalesce(a.ex, b.ex) AS ex, a.k AS ak, a.v AS av, b.k AS bk, b.v AS bv"
            join = f"{self.how} JOIN"
            where = " WHERE coalesce(a.v, 0) + coalesce(b.v, 0) <> 9" if self.where else ""
        return (f"{self.join_form} SELECT {cols} FROM {left} {self.left.sql()} AS a {join} "
                f"{right} {self.right.sql()} AS b ON a.ex = b.ex AND a.k = b.k{theta}"
                f"{where}").strip()

    def features(self) -> set[str]:
        what = f"{self.how} JOIN" + (" (theta)" if self.theta else "")
        return super().features() | {what, f"window {self.left.name}",
                                     f"window {self.right.name}"} | (
            {f"WHERE above {self.how} JOIN"} if self.where else set())

    def relation(self, inputs: Inputs) -> Relation:
        left, right = self.streams

        def match(a: dict, b: dict) -> bool:
            return (a["ex"], a["k"]) == (b["ex"], b["k"]) and (not self.theta
                                                               or a["v"] < b["v"])

        if self.how in ("SEMI", "ANTI"):
            cols: tuple[str, ...] = ("ex", "k", "v")

            def make(a: dict | None, b: dict | None) -> tuple:
                assert a is not None
                return (a["ex"], a["k"], a["v"])
        else:
            cols = ("ex", "ak", "av", "bk", "bv")

            def make(a: dict | None, b: dict | None) -> tuple:
                ex = (a or b or {})["ex"]
                return (ex, *((None, None) if a is None else (a["k"], a["v"])),
                        *((None, None) if b is None else (b["k"], b["v"])))

        rel = outer_join(window(inputs[left], self.left), window(inputs[right], self.right),
                         self.how, match, cols, make)
        if not self.where:
            return rel
        if self.how in ("SEMI", "ANTI"):
            return rel.where(lambda r: r["v"] != 9)
        return rel.where(lambda r: (r["av"] or 0) + (r["bv"] or 0) != 9)


@dataclass(frozen=True)
class BandJoinQuery(JoinShape):
    """A theta join without equality on k: |a.v - b.v| <= 1 within an example."""

    left: Win
    right: Win
    streams: tuple[str, str] = ("s", "s2")
    join_form: str = ""

    def sql(self) -> str:
        left, right = self.streams
        return (f"{self.join_form} SELECT a.ex AS ex, a.k AS ak, b.k AS bk, a.v - b.v AS dv "
                f"FROM {left} {self.left.sql()} AS a JOIN {right} {self.right.sql()} AS b "
                "ON a.ex = b.ex AND abs(a.v - b.v) <= 1").strip()

    def features(self) -> set[str]:
        return super().features() | {"theta join", "projection", f"window {self.left.name}",
                                     f"window {self.right.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        left, right = self.streams
        return join(window(inputs[left], self.left), window(inputs[right], self.right),
                    key=lambda r: r["ex"], theta=lambda a, b: abs(a["v"] - b["v"]) <= 1,
                    columns=("ex", "ak", "bk", "dv"),
                    make=lambda a, b: (a["ex"], a["k"], b["k"], a["v"] - b["v"]))


@dataclass(frozen=True)
class UnionQuery(Shape):
    """SELECT ex, k, v FROM s [w1] WHERE v > w UNION ALL SELECT ex, k, v FROM s2 [w2]."""

    left: Win
    right: Win
    where: int
    streams: tuple[str, str] = ("s", "s2")

    def sql(self) -> str:
        left, right = self.streams
        return (f"SELECT ex, k, v FROM {left} {self.left.sql()} WHERE v > {self.where} "
                f"UNION ALL SELECT ex, k, v FROM {right} {self.right.sql()}")

    def apas(self) -> str | None:
        left, right = self.streams
        wins = [self.left.apas(left), self.right.apas(right)]
        if None in wins:
            return None
        return (f"where {wins[0]} and ${left}.v > {self.where} "
                f"select a[ex = ${left}.ex, k = ${left}.k, v = ${left}.v];\n"
                f"where {wins[1]} select b[ex = ${right}.ex, k = ${right}.k, v = ${right}.v];\n"
                "where util.union($a[T], $b[T]) select u[$new[T]];\nselect [$u[T]]")

    def features(self) -> set[str]:
        return super().features() | {"UNION ALL", "WHERE", f"window {self.left.name}",
                                     f"window {self.right.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        left, right = self.streams
        cols = ("ex", "k", "v")
        return union(window(inputs[left], self.left, cols).where(lambda r: r["v"] > self.where),
                     window(inputs[right], self.right, cols))


@dataclass(frozen=True)
class DistinctQuery(WindowedAggregate):
    """[form] SELECT DISTINCT ex, k, v % 3 AS m FROM s [win]."""

    win: Win
    agg_form: str = ""
    stream: str = "s"

    def sql(self) -> str:
        return (f"{self.agg_form} SELECT DISTINCT ex, k, v % 3 AS m FROM {self.stream} "
                f"{self.win.sql()}").strip()

    def features(self) -> set[str]:
        return super().features() | {"SELECT DISTINCT", f"window {self.win.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(inputs[self.stream], self.win)
        return per_snapshot([rel], ("ex", "k", "m"), lambda snaps: list(
            {(r["ex"], r["k"], r["v"] % 3) for r in snaps[0]}))


@dataclass(frozen=True)
class SetOperationQuery(JoinShape):
    """SELECT ex, k, v % 3 AS m FROM s [w1] {UNION | INTERSECT | EXCEPT} [ALL] SELECT ex, k,
    v % 3 FROM s2 [w2] (UNION ALL is ``UnionQuery``'s)."""

    left: Win
    right: Win
    op: str
    every: bool = False
    streams: tuple[str, str] = ("s", "s2")
    join_form: str = ""

    def sql(self) -> str:
        left, right = self.streams
        op = f"{self.op}{' ALL' if self.every else ''}"
        return (f"{self.join_form} SELECT ex, k, v % 3 AS m FROM {left} {self.left.sql()} "
                f"{op} SELECT ex, k, v % 3 FROM {right} {self.right.sql()}").strip()

    def features(self) -> set[str]:
        return super().features() | {f"{self.op}{' ALL' if self.every else ''}",
                                     f"window {self.left.name}", f"window {self.right.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        left, right = self.streams

        def combined(snaps: list[list[dict]]) -> list[tuple]:
            a, b = (Counter((r["ex"], r["k"], r["v"] % 3) for r in snap) for snap in snaps)
            if self.op == "UNION":
                return list(a | b)
            if self.every:  # bags: the smaller count, or what is left of a's
                return list(((a & b) if self.op == "INTERSECT" else (a - b)).elements())
            return [v for v in a if (b[v] > 0) == (self.op == "INTERSECT")]

        return per_snapshot([window(inputs[left], self.left), window(inputs[right], self.right)],
                            ("ex", "k", "m"), combined)


def ranked(rows: list[tuple], kind: str, n: int | None, better: Callable[[tuple], object],
           ties: Callable[[tuple], object]) -> list[tuple]:
    """SQL's ranking of one partition's rows (each copy a row): (row, number) for those
    numbered at most ``n``; ``better`` orders them, ``ties`` orders equals (ROW_NUMBER)."""
    order = sorted(rows, key=lambda r: (better(r), ties(r)))
    out = []
    for i, r in enumerate(order):
        if kind == "ROW_NUMBER":
            number = i + 1
        elif kind == "RANK":
            number = 1 + sum(1 for x in order if better(x) < better(r))
        else:
            number = 1 + len({better(x) for x in order if better(x) < better(r)})
        if n is None or number <= n:
            out.append((r, number))
    return out


@dataclass(frozen=True)
class TopNQuery(WindowedAggregate):
    """Top-N of s [win] per snapshot: ``LIMIT``: SELECT ex, k, v ... ORDER BY v [DESC]
    LIMIT n over all cases; a ranking function: SELECT * FROM (SELECT ex, k, v, KIND() OVER
    (PARTITION BY ex[, k] ORDER BY v [DESC]) AS r ...) WHERE r <= n; ``counts``: the ranking
    over count(*) per (ex, k), partitioned by ex (NEXMark q5's shape)."""

    win: Win
    kind: str  # LIMIT, ROW_NUMBER, RANK, DENSE_RANK
    n: int
    desc: bool = True
    by_k: bool = False
    counts: bool = False
    agg_form: str = ""

    def sql(self) -> str:
        desc = " DESC" if self.desc else ""
        if self.kind == "LIMIT":
            return (f"{self.agg_form} SELECT ex, k, v FROM s {self.win.sql()} ORDER BY v{desc}"
                    f" LIMIT {self.n}").strip()
        if self.counts:
            inner = (f"SELECT ex, k, count(*) AS c, {self.kind}() OVER (PARTITION BY ex "
                     f"ORDER BY count(*){desc}) AS r FROM s {self.win.sql()} GROUP BY ex, k")
        else:
            part = "ex, k" if self.by_k else "ex"
            inner = (f"SELECT ex, k, v, {self.kind}() OVER (PARTITION BY {part} ORDER BY "
                     f"v{desc}) AS r FROM s {self.win.sql()}")
        return f"{self.agg_form} SELECT * FROM ({inner}) WHERE r <= {self.n}".strip()

    def features(self) -> set[str]:
        what = "ORDER BY LIMIT" if self.kind == "LIMIT" else f"{self.kind} <= n"
        return super().features() | {f"Top-N: {what}" + (" over counts" if self.counts
                                                          else ""),
                                      f"window {self.win.name}"}

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(inputs["s"], self.win)
        sign = -1 if self.desc else 1
        if self.counts:
            rel = aggregate(rel, ("ex", "k"), [("c", AGGS["count(*)"])])
            cols: tuple[str, ...] = ("ex", "k", "c")
        else:
            cols = ("ex", "k", "v")

        def top(snaps: list[list[dict]]) -> list[tuple]:
            rows = [tuple(r[c] for c in cols) for r in snaps[0]]
            if self.kind == "LIMIT":
                return [r for r, _ in ranked(rows, "ROW_NUMBER", self.n,
                                             lambda r: sign * r[2], lambda r: r)]
            parts: dict[tuple, list[tuple]] = {}
            for r in rows:
                parts.setdefault(r[:2] if self.by_k and not self.counts else r[:1], []).append(r)
            return [(*r, number) for part in parts.values()
                    for r, number in ranked(part, self.kind, self.n, lambda r: sign * r[2],
                                            lambda r: r)]

        out_cols = cols if self.kind == "LIMIT" else (*cols, "r")
        return per_snapshot([rel], out_cols, top)


@dataclass(frozen=True)
class FilterQuery(Shape):
    """SELECT ex, k, v, v * 10 + 1 AS w FROM s WHERE v > w: raw events in, instants out."""

    where: int
    stream: str = "s"
    records_kind = "instants"

    def sql(self) -> str:
        return f"SELECT ex, k, v, v * 10 + 1 AS w FROM {self.stream} WHERE v > {self.where}"

    def apas(self) -> str | None:
        s = self.stream
        return (f"where ${s}.v > {self.where} select o[ex = ${s}.ex, k = ${s}.k, v = ${s}.v, "
                f"w = ${s}.v * 10 + 1];\nselect [$o[T]]")

    def features(self) -> set[str]:
        return {"stream: WHERE", "stream: projection"}

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        events = [e for e in inputs[self.stream] if start is None or e["t"] >= start]
        return stream_output(events, ("ex", "k", "v", "w"),
                             lambda e: (e["ex"], e["k"], e["v"], e["v"] * 10 + 1)
                             if e["v"] > self.where else None)


@dataclass(frozen=True)
class UnionStreamsQuery(Shape):
    """SELECT ex, k, v FROM s WHERE v > w UNION ALL SELECT ex, k, v FROM s2: instants."""

    where: int
    streams: tuple[str, str] = ("s", "s2")
    records_kind = "instants"

    def sql(self) -> str:
        left, right = self.streams
        return (f"SELECT ex, k, v FROM {left} WHERE v > {self.where} "
                f"UNION ALL SELECT ex, k, v FROM {right}")

    def features(self) -> set[str]:
        return {"stream: UNION ALL", "stream: WHERE"}

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        left, right = self.streams
        events = [e for e in inputs[left] if e["v"] > self.where] + inputs[right]
        return stream_output([e for e in events if start is None or e["t"] >= start],
                             ("ex", "k", "v"), lambda e: (e["ex"], e["k"], e["v"]))


@dataclass(frozen=True)
class DerivedStreamQuery(Shape):
    """CREATE STREAM name AS SELECT ex, k, v + 1 AS v, t FROM s WHERE v <> w; then a windowed
    aggregate over it (a stream derived from a stream, read like a source)."""

    name: str
    skip: int
    win: Win
    stream: str = "s"

    def setup(self) -> str:
        return (f"CREATE STREAM {self.name} AS SELECT ex, k, v + 1 AS v, t FROM {self.stream} "
                f"WHERE v <> {self.skip}")

    def sql(self) -> str:
        return (f"SELECT ex, k, max(v) AS m, count(*) AS c FROM {self.name} {self.win.sql()} "
                "GROUP BY ex, k")

    def features(self) -> set[str]:
        return super().features() | {"derived stream", f"window {self.win.name}", "GROUP BY"}

    def derived(self, inputs: Inputs) -> list[Event]:
        events = inputs[self.stream]
        return StreamEvents(({**e, "v": e["v"] + 1} for e in events if e["v"] != self.skip),
                            ended_at(events))

    def relation(self, inputs: Inputs) -> Relation:
        rel = window(self.derived(inputs), self.win)
        return aggregate(rel, ("ex", "k"), [("m", AGGS["max(v)"]), ("c", AGGS["count(*)"])])


@dataclass(frozen=True)
class ChunkTopQuery(Shape):
    """[form] SELECT b.ex, b.k, b.v FROM s [CUT ON t BY d] AS b JOIN top AS m ON b.ex = m.ex
    [AND b.k = m.k] AND b.v = m.top [AND b.k <> 'y'], with CREATE STREAM top AS SELECT ex[, k],
    max(v) AS top FROM s [CUT ON t BY d] GROUP BY ex[, k]: each chunk's rows that have the
    chunk's (or the chunk and key's) highest v (NEXMark q7's shape), or, ``of`` s2, the
    highest v of s2's chunk (q8's shape: two streams)."""

    name: str
    by: int
    per_key: bool = False
    theta: bool = False
    agg_form: str = ""
    of: str = "s"  # the stream the aggregate is over (q8: another one)

    @property
    def keys(self) -> tuple[str, ...]:
        return ("ex", "k") if self.per_key else ("ex",)

    @property
    def form(self) -> str:
        return self.agg_form

    @property
    def period(self) -> int | None:
        return self.by

    @property
    def records_kind(self) -> str:  # type: ignore[override]
        return _records_kind(self.agg_form)

    def setup(self) -> str:
        keys = ", ".join(self.keys)
        return (f"CREATE STREAM {self.name} AS SELECT {keys}, max(v) AS top "
                f"FROM {self.of} [CUT ON t BY {self.by}] GROUP BY {keys}")

    def sql(self) -> str:
        on = " AND ".join([*(f"b.{k} = m.{k}" for k in self.keys), "b.v = m.top",
                           *(["b.k <> 'y'"] if self.theta else [])])
        return (f"{self.agg_form} SELECT b.ex AS ex, b.k AS k, b.v AS v FROM s "
                f"[CUT ON t BY {self.by}] AS b JOIN {self.name} AS m ON {on}").strip()

    def features(self) -> set[str]:
        return super().features() | {"join of chunks with their aggregate"}

    def relation(self, inputs: Inputs) -> Relation:
        chunks = window(inputs["s"], Win("cut", self.by, 1))
        tops = aggregate(window(inputs[self.of], Win("cut", self.by, 1)), self.keys,
                         [("top", AGGS["max(v)"])])
        return join(chunks, tops, key=lambda r: tuple(r[k] for k in self.keys),
                    theta=lambda b, m: b["v"] == m["top"] and (not self.theta or b["k"] != "y"),
                    columns=("ex", "k", "v"), make=lambda b, m: (b["ex"], b["k"], b["v"]))


@dataclass(frozen=True)
class TableFunctionQuery(Shape):
    """SELECT * FROM fold(TABLE s [win] PARTITION BY ex[, k], base): the test table function
    ``tablefns.Fold``, chunk by chunk: per key, after each chunk, (chunks seen, the chunk's
    rows, a number folded over every v in order), an instant at the chunk's cut point (over
    the stream without a window: each instant a chunk). Rows in a chunk in (t, ex, k, v)
    order; the fold is (acc * base + v + 1) mod 1,000,003.
    """

    win: Win | None
    per_key: bool
    base: int
    records_kind = "instants"

    @property
    def keys(self) -> tuple[str, ...]:
        return ("ex", "k") if self.per_key else ("ex",)

    def setup(self) -> str:
        return ("CREATE FUNCTION fold(base BIGINT) RETURNS TABLE (chunks BIGINT, n BIGINT, "
                "acc BIGINT) USING 'tablefns:Fold'")

    def sql(self) -> str:
        win = f" {self.win.sql()}" if self.win is not None else ""
        return (f"SELECT * FROM fold(TABLE s{win} PARTITION BY {', '.join(self.keys)}, "
                f"{self.base})")

    def features(self) -> set[str]:
        return {f"table function over {self.win.name if self.win else 'a stream'}"}

    def records(self, inputs: Inputs, start: float | None = None,
                shared: bool = False) -> list[tuple]:
        columns = ("ex", "k", "v", "t")
        events = inputs["s"]
        # each chunk once: its rows never leave (no chunk is valid for no time, as one can
        # be in a relation when the next chunks start at one instant)
        once = replace(self.win, slide=10**9) if self.win is not None else None
        elements = (window(events, once).elements if once is not None
                    else tuple((tuple(e[c] for c in columns), e["t"], e["t"]) for e in events))
        chunks: dict[tuple, dict[float, list[dict]]] = {}
        for values, ts, _te in elements:
            row = dict(zip(columns, values, strict=True))
            key = tuple(row[c] for c in self.keys)
            chunks.setdefault(key, {}).setdefault(ts, []).append(row)
        out = []
        for key, by_cut in chunks.items():
            acc = 0
            for seen, cut in enumerate(sorted(by_cut), start=1):
                rows = sorted(by_cut[cut], key=lambda r: (r["t"], r["ex"], r["k"], r["v"]))
                for r in rows:
                    acc = (acc * self.base + r["v"] + 1) % 1_000_003
                out.append(((*key, seen, len(rows), acc), cut))
        return sorted(out, key=_key)


@dataclass(frozen=True)
class DerivedRelationQuery(Shape):
    """CREATE STREAM name AS SELECT ex, k, sum(v) AS sv, count(*) AS c FROM s [win] GROUP BY
    ex, k (a relation other queries read); the query joins it with s2 [w2], or only filters
    it (``right`` None)."""

    name: str
    win: Win
    right: Win | None
    streams: tuple[str, str] = ("s", "s2")

    def setup(self) -> str:
        return (f"CREATE STREAM {self.name} AS SELECT ex, k, sum(v) AS sv, count(*) AS c "
                f"FROM {self.streams[0]} {self.win.sql()} GROUP BY ex, k")

    def sql(self) -> str:
        if self.right is None:
            return f"SELECT ex, k, sv FROM {self.name} WHERE c > 1"
        return (f"SELECT d.ex AS ex, d.k AS k, d.sv AS sv, b.v AS bv FROM {self.name} AS d "
                f"JOIN {self.streams[1]} {self.right.sql()} AS b "
                "ON d.ex = b.ex AND d.k = b.k AND d.sv > b.v")

    def features(self) -> set[str]:
        out = super().features() | {"derived relation read by several queries"}
        return out | ({"theta join"} if self.right is not None else {"WHERE"})

    def totals(self, inputs: Inputs) -> Relation:
        rel = window(inputs[self.streams[0]], self.win)
        return aggregate(rel, ("ex", "k"), [("sv", AGGS["sum(v)"]), ("c", AGGS["count(*)"])])

    def relation(self, inputs: Inputs) -> Relation:
        totals = self.totals(inputs)
        if self.right is None:
            return totals.where(lambda r: r["c"] > 1).select(
                ("ex", "k", "sv"), lambda r: (r["ex"], r["k"], r["sv"]))
        return join(totals, window(inputs[self.streams[1]], self.right),
                    key=lambda r: (r["ex"], r["k"]), theta=lambda d, b: d["sv"] > b["v"],
                    columns=("ex", "k", "sv", "bv"),
                    make=lambda d, b: (d["ex"], d["k"], d["sv"], b["v"]))


@dataclass(frozen=True)
class AlignedQuery(Shape):
    """A query over queries on one grid of instants: CREATE STREAM {name} AS SELECT ex, k,
    count(*) AS n, sum(v) AS sv FROM s [win] GROUP BY ex, k (a hopping or chunk window,
    which changes only at multiples of its step), then by ``kind``:
    - ``top``: SELECT c.ex, c.k, c.n FROM name c JOIN name_top m ON c.ex = m.ex AND c.n =
      m.top, name_top being SELECT ex, max(n) AS top FROM name GROUP BY ex (NEXMark q5);
    - ``topn``: the same rows as ``top``, as a ranking: SELECT ex, k, n FROM (SELECT ex, k, n,
      RANK() OVER (PARTITION BY ex ORDER BY n DESC) AS r FROM name) WHERE r = 1;
    - ``agg``: SELECT ex, max(n) AS top, sum(sv) AS ssv, count(*) AS c FROM name GROUP BY ex
      (an aggregate of an aggregate);
    - ``INNER``, ``LEFT``, ``RIGHT``, ``FULL``, ``SEMI``, ``ANTI``: that join of name with
      name_2, the same aggregate over s2 [win2], on ex and k (two streams, each at its own
      pace).
    """

    name: str
    win: Win
    kind: str
    agg_form: str = ""
    win2: Win | None = None

    @property
    def form(self) -> str:
        return self.agg_form

    @property
    def records_kind(self) -> str:  # type: ignore[override]
        return _records_kind(self.agg_form)

    def counts_sql(self, name: str, stream: str, win: Win) -> str:
        return (f"CREATE STREAM {name} AS SELECT ex, k, count(*) AS n, sum(v) AS sv "
                f"FROM {stream} {win.sql()} GROUP BY ex, k")

    def setup(self) -> str:
        first = self.counts_sql(self.name, "s", self.win)
        if self.kind == "top":
            return (f"{first}; CREATE STREAM {self.name}_top AS SELECT ex, max(n) AS top "
                    f"FROM {self.name} GROUP BY ex")
        if self.kind in ("agg", "topn"):
            return first
        assert self.win2 is not None
        return f"{first}; {self.counts_sql(f'{self.name}_2', 's2', self.win2)}"

    def sql(self) -> str:
        form = f"{self.agg_form} " if self.agg_form else ""
        if self.kind == "top":
            return (f"{form}SELECT c.ex AS ex, c.k AS k, c.n AS n FROM {self.name} AS c JOIN "
                    f"{self.name}_top AS m ON c.ex = m.ex AND c.n = m.top")
        if self.kind == "topn":
            return (f"{form}SELECT ex, k, n FROM (SELECT ex, k, n, RANK() OVER (PARTITION BY "
                    f"ex ORDER BY n DESC) AS r FROM {self.name}) WHERE r = 1")
        if self.kind == "agg":
            return (f"{form}SELECT ex, max(n) AS top, sum(sv) AS ssv, count(*) AS c "
                    f"FROM {self.name} GROUP BY ex")
        if self.kind in ("SEMI", "ANTI"):
            cols, join = "ex, k, n", f"LEFT {self.kind} JOIN"
        else:
            cols, join = ("coalesce(a.ex, b.ex) AS ex, a.k AS ak, a.n AS an, b.k AS bk, "
                          "b.n AS bn", f"{self.kind} JOIN")
        return (f"{form}SELECT {cols} FROM {self.name} AS a {join} {self.name}_2 AS b "
                "ON a.ex = b.ex AND a.k = b.k")

    def features(self) -> set[str]:
        what = {"top": "join with a derived aggregate", "agg": "aggregate of an aggregate",
                "topn": "ranking of a derived aggregate"}
        return super().features() | {what.get(self.kind, f"{self.kind} JOIN of two aggregates"),
                                     f"over window {self.win.name}"}

    def counts(self, events: StreamEvents, win: Win) -> Relation:
        return aggregate(window(events, win), ("ex", "k"),
                         [("n", AGGS["count(*)"]), ("sv", AGGS["sum(v)"])])

    def relation(self, inputs: Inputs) -> Relation:
        counts = self.counts(inputs["s"], self.win)
        if self.kind == "agg":
            return aggregate(counts, ("ex",), [
                ("top", lambda rows: max(r["n"] for r in rows)),
                ("ssv", lambda rows: sum(r["sv"] for r in rows)), ("c", len)])
        if self.kind in ("top", "topn"):
            tops = aggregate(counts, ("ex",), [("top", lambda rows: max(r["n"] for r in rows))])
            return join(counts, tops, key=lambda r: r["ex"],
                        theta=lambda c, m: c["n"] == m["top"], columns=("ex", "k", "n"),
                        make=lambda c, m: (c["ex"], c["k"], c["n"]))
        assert self.win2 is not None
        other = self.counts(inputs["s2"], self.win2)

        def match(a: dict, b: dict) -> bool:
            return (a["ex"], a["k"]) == (b["ex"], b["k"])

        if self.kind in ("SEMI", "ANTI"):
            return outer_join(counts, other, self.kind, match, ("ex", "k", "n"),
                              lambda a, b: (a["ex"], a["k"], a["n"]))
        return outer_join(
            counts, other, self.kind, match, ("ex", "ak", "an", "bk", "bn"),
            lambda a, b: ((a or b or {})["ex"], *((a["k"], a["n"]) if a else (None, None)),
                          *((b["k"], b["n"]) if b else (None, None))))
