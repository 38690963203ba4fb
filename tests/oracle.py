"""A small per-event reference interpreter of sparkcq's semantics, in plain Python.

It evaluates a query the way the contract defines it: turn events into elements with their
windows, evaluate ordinary SQL on the snapshot at every instant where any input changes,
and turn the sequence of snapshots back into coalesced elements (or instants). It knows
nothing of cycles, watermarks, change events or Spark, which is the point.

Query shapes are dataclasses that render themselves to the engine's SQL and evaluate
themselves here, so the two cannot disagree about what the query is. Every query carries an
example id column ``ex`` in its keys, so many independent examples share one engine run.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

INF = math.inf
Row = tuple
Element = tuple[Row, float, float]


# -- windows ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Win:
    """A window: kind in range/slide/now/unbounded/rows/cut, with its parameters."""

    kind: str
    size: int = 0
    slide: int = 0
    by_k: bool = False

    def sql(self) -> str:
        return {
            "range": f"[RANGE {self.size}]",
            "slide": f"[RANGE {self.size} SLIDE {self.slide}]",
            "now": "[NOW]",
            "unbounded": "[UNBOUNDED]",
            "rows": f"[PARTITION BY ex{', k' if self.by_k else ''} ROWS {self.size}]",
            "cut": f"[CUT ON t BY {self.size}]",
        }[self.kind]

    @property
    def period(self) -> int | None:
        return {"slide": self.slide, "cut": self.size}.get(self.kind)

    def elements(self, events: list[dict]) -> list[tuple[dict, float, float]]:
        """Each event (a dict with ex, k, v, t) as an element (event, ts, te)."""
        out = []
        if self.kind == "rows":
            parts: dict[tuple, list[dict]] = {}
            for e in sorted(events, key=lambda e: (e["t"], e["k"], e["v"])):
                parts.setdefault((e["ex"], e["k"] if self.by_k else None), []).append(e)
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
                    out.append((e, -((-t) // s) * s, -((-(t + self.size)) // s) * s))
                elif self.kind == "now":
                    out.append((e, t, t + 1))
                elif self.kind == "unbounded":
                    out.append((e, t, INF))
                elif self.kind == "cut":
                    cut = (t // self.size + 1) * self.size
                    out.append((e, cut, cut + self.size))
        return [x for x in out if x[1] < x[2]]


# -- relation -> output ----------------------------------------------------------------------
def snapshots(elements: list[tuple[object, float, float]]) -> list[tuple[float, list]]:
    """The critical instants (every start and end) with the snapshot from each on."""
    instants = sorted({x[1] for x in elements} | {x[2] for x in elements if x[2] < INF})
    return [(c, [x[0] for x in elements if x[1] <= c < x[2]]) for c in instants]


def to_output(series: list[tuple[float, list[Row]]], form: str,
              period: int | None) -> list[tuple]:
    """Output rows of a relation given as (instant, snapshot from then on) in time order."""
    if form == "":
        return coalesce(series)
    out: list[tuple] = []
    prev: Counter = Counter()
    last_change = max((c for c, snap in series if True), default=None)
    for i, (c, snap) in enumerate(series):
        now = Counter(snap)
        if form in ("ISTREAM", "DSTREAM"):
            a, b = (now, prev) if form == "ISTREAM" else (prev, now)
            for row, n in (a - b).items():
                out += [(row, c)] * n
        elif form == "RSTREAM" and period is None and now != prev:
            out += [(row, c) for row, n in now.items() for _ in range(n)]
        elif form == "RSTREAM" and period is not None:
            end = series[i + 1][0] if i + 1 < len(series) else c
            if last_change is not None:
                end = min(end, last_change)
            first = -((-c) // period) * period
            for m in range(int(first), int(end), period):
                out += [(row, m) for row, n in now.items() for _ in range(n)]
        prev = now
    return sorted(out, key=_key)


def coalesce(series: list[tuple[float, list[Row]]]) -> list[tuple]:
    """Canonical coalescing: layer k of a value spans where it occurs at least k times."""
    out = []
    open_at: dict[tuple[Row, int], float] = {}
    prev: Counter = Counter()
    for c, snap in [*series, (INF, [])]:
        now = Counter(snap)
        for row in set(prev) | set(now):
            for layer in range(now[row] + 1, prev[row] + 1):
                out.append((row, open_at.pop((row, layer)), c))
            for layer in range(prev[row] + 1, now[row] + 1):
                open_at[(row, layer)] = c
        prev = now
    return sorted(((r, ts, None if te == INF else te) for r, ts, te in out), key=_key)


def _key(x: tuple) -> tuple:
    return tuple((v is None, str(type(v)), v) if not isinstance(v, tuple) else _key(v)
                 for v in x)


# -- query shapes ----------------------------------------------------------------------------
AGGS: dict[str, Callable[[list[int]], object]] = {
    "count(*)": len,
    "sum(v)": sum,
    "min(v)": min,
    "max(v)": max,
    "avg(v)": lambda vs: float(Fraction(sum(vs), len(vs))),
    "count(DISTINCT v)": lambda vs: len(set(vs)),
    # other arguments, some NULL: min and max of several arguments share one multiset
    "min(9 - v)": lambda vs: min(9 - v for v in vs),
    "max(nullif(v, 4))": lambda vs: max((v for v in vs if v != 4), default=None),
    "count(DISTINCT v % 3)": lambda vs: len({v % 3 for v in vs}),
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


#: user aggregates (tests/udas.py and sparkcq.aggregates.library) by the call the engine
#: gets, with their meaning over a snapshot's values; ``UDA_DEFINITIONS`` creates them
UDAS: dict[str, Callable[[list[int]], object]] = {
    "usum(v)": lambda vs: sum(vs) if vs else None,
    "uavg(v)": lambda vs: float(Fraction(sum(vs), len(vs))) if vs else None,
    "umin(v)": lambda vs: min(vs, default=None),
    "umax(v)": lambda vs: max(vs, default=None),
    "umax(nullif(v, 4))": lambda vs: max((v for v in vs if v != 4), default=None),
    "median(v)": _median,
    "pct(v, 0.25)": lambda vs: _percentile(vs, 0.25),
    "mode(v)": _mode,
    "ndistinct(v % 4)": lambda vs: len({v % 4 for v in vs}),
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


@dataclass(frozen=True)
class AggQuery:
    """SELECT ex[, k], aggs FROM s [win] [WHERE v > w] GROUP BY ex[, k] [HAVING count(*) > h]."""

    win: Win
    aggs: tuple[str, ...]
    grouped: bool
    where: int | None = None
    having: int | None = None
    form: str = ""

    def sql(self, stream: str) -> str:
        keys = "ex, k" if self.grouped else "ex"
        cols = ", ".join(f"{a} AS a{i}" for i, a in enumerate(self.aggs))
        where = f" WHERE v > {self.where}" if self.where is not None else ""
        having = f" HAVING count(*) > {self.having}" if self.having is not None else ""
        return (f"{self.form} SELECT {keys}, {cols} FROM {stream} {self.win.sql()}{where} "
                f"GROUP BY {keys}{having}").strip()

    def evaluate(self, events: list[dict]) -> list[tuple]:
        elements = self.win.elements(events)
        series = []
        for c, snap in snapshots(elements):
            rows = [e for e in snap if self.where is None or e["v"] > self.where]
            groups: dict[tuple, list[int]] = {}
            for e in rows:
                groups.setdefault((e["ex"], e["k"]) if self.grouped else (e["ex"],),
                                  []).append(e["v"])
            out = []
            for key, vs in groups.items():
                if self.having is not None and not len(vs) > self.having:
                    continue
                out.append((*key, *[(AGGS | UDAS)[a](vs) for a in self.aggs]))
            series.append((c, out))
        return to_output(series, self.form, self.win.period)


@dataclass(frozen=True)
class JoinQuery:
    """SELECT a.ex, a.k, a.v, b.v FROM s [w1] a JOIN s2 [w2] b ON ex, k [AND a.v < b.v]."""

    left: Win
    right: Win
    theta: bool

    def sql(self, left: str, right: str) -> str:
        theta = " AND a.v < b.v" if self.theta else ""
        return (f"SELECT a.ex AS ex, a.k AS k, a.v AS av, b.v AS bv FROM {left} "
                f"{self.left.sql()} AS a JOIN {right} {self.right.sql()} AS b "
                f"ON a.ex = b.ex AND a.k = b.k{theta}")

    def evaluate(self, left: list[dict], right: list[dict]) -> list[tuple]:
        out = []
        for a, ats, ate in self.left.elements(left):
            for b, bts, bte in self.right.elements(right):
                if (a["ex"], a["k"]) != (b["ex"], b["k"]) or (self.theta and not a["v"] < b["v"]):
                    continue
                ts, te = max(ats, bts), min(ate, bte)
                if ts < te:
                    out.append(((a["ex"], a["k"], a["v"], b["v"]), ts, te))
        return coalesce(snapshots(out))


@dataclass(frozen=True)
class FilterQuery:
    """SELECT ex, k, v FROM s WHERE v > w: raw events in, instants out."""

    where: int

    def sql(self, stream: str) -> str:
        return f"SELECT ex, k, v FROM {stream} WHERE v > {self.where}"

    def evaluate(self, events: list[dict]) -> list[tuple]:
        return sorted((((e["ex"], e["k"], e["v"]), e["t"]) for e in events
                       if e["v"] > self.where), key=_key)


@dataclass(frozen=True)
class UnionQuery:
    """SELECT ex, k, v FROM s [w1] WHERE v > w UNION ALL SELECT ex, k, v FROM s2 [w2]."""

    left: Win
    right: Win
    where: int

    def sql(self, left: str, right: str) -> str:
        return (f"SELECT ex, k, v FROM {left} {self.left.sql()} WHERE v > {self.where} "
                f"UNION ALL SELECT ex, k, v FROM {right} {self.right.sql()}")

    def evaluate(self, left: list[dict], right: list[dict]) -> list[tuple]:
        els = [((e["ex"], e["k"], e["v"]), ts, te) for e, ts, te in self.left.elements(left)
               if e["v"] > self.where]
        els += [((e["ex"], e["k"], e["v"]), ts, te) for e, ts, te in self.right.elements(right)]
        return coalesce(snapshots(els))
