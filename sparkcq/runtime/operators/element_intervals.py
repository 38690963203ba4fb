"""Coalesced interval records of a query whose elements' ends are known when they start.

An interval join of RANGE windows (``interval_join.py``) knows each pair's end, the
earlier of its elements' ends, the moment it finds the pair. Its query's records then need
no -1 change per pair and no state rewritten every cycle: the open layers of each row
value are kept as runs (``runtime/state_runs.py``), each layer with the instant it will
close unless a later element of the same value extends it (its provisional end, ``_pe``).
A run is dropped whole once every layer in it has closed.

Canonical coalescing (``outputs.coalesced``) opens layer k of a row value while k or more
of its elements hold. When a value's live elements end at ``e1 <= e2 <= ... <= eL``, its
top layer ``L`` closes at ``e1`` and its bottom layer at ``eL``: layer k's provisional end
is ``e(L - k + 1)``. A later element only adds to the count, so it can only move a
layer's end later (the value's layers are then written again, and the latest end of each
(value, layer, start) is the one that holds).

A cycle ``[lo, hi)`` touches the values with a new element or a layer whose provisional
end lies in the cycle (found in the runs that may hold such ends); only those are read
from the runs (one pass over them, joined with the touched values), coalesced with the
cycle's starts and ends as any relation's changes are, and written back with their new
provisional ends. Value ``x`` with elements ``[0, 10)`` and, a cycle later, ``[6, 20)``::

    cycle [0, 5):   +x@0                      I x [0, -)   layer 1 since 0, ends 10
    cycle [5, 12):  +x@6, -x@10 (layer 2)     I x [6, 10)  layer 1 since 0, ends 20
    cycle [12, 25): -x@20                     C x [0, 20)  nothing left
"""

from __future__ import annotations

from functools import lru_cache

from pyspark.sql import DataFrame
from pyspark.sql.types import IntegerType, LongType, StructField, StructType

from sparkcq.model.columns import LAYER, QID, TE, TS, D, T
from sparkcq.model.time import TIME_MAX
from sparkcq.plan.nodes import EdgeKind, Filter, IntervalJoin, PlanNode, Project
from sparkcq.runtime.frames import Runtime, SqlViews, bound_sql, q, union_by_name
from sparkcq.runtime.operators.outputs import coalesced
from sparkcq.runtime.operators.window import side_span
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.state_runs import StateRuns

END = "_pe"  # a layer's provisional end
RANK = "_rk"


def element_source(node: PlanNode) -> IntervalJoin | None:
    """The interval join whose elements ``node``'s slices carry with their ends
    (``Slice.elements``), through filters and projections; None if they carry none.
    """
    while isinstance(node, Filter | Project) and node.kind is not EdgeKind.TABLE:
        node = node.child
    return node if isinstance(node, IntervalJoin) else None


def pair_span(join: IntervalJoin) -> int | None:
    """The longest a pair of ``join`` lasts: its shorter window's longest element (None:
    neither window's elements end).
    """
    return side_span(join)


def layers_schema(row: str, row_type: StructType) -> StructType:
    """The open layers' columns: query id, row, layer, start and provisional end."""
    return StructType([StructField(QID, IntegerType()), StructField(row, row_type),
                       StructField(LAYER, LongType()), StructField(TS, LongType()),
                       StructField(END, LongType())])


class ElementIntervals:
    """One query's open layers as runs by provisional end, and its records (see module).

    ``row`` is the column holding the query's rows (``shared_output.row_column``): its
    records join everyone's in the shared formatter's bundle. ``span``: the longest an
    element lasts, if known (merged runs then span a share of it: ``StateRuns``).
    """

    def __init__(self, rt: Runtime, row: str, row_type: StructType, name: str,
                 span: int | None):
        self.row = row
        self.span = span
        self.schema = layers_schema(row, row_type)
        # a layer's provisional end lies at most ``span`` after the cycle that wrote it
        self.layers = StateRuns(rt, self.schema, name, TS, END, (QID, row), span)
        self.rt = rt
        self.views = SqlViews(rt.spark, "elements")

    def step(self, new: DataFrame | None, lo: int, hi: int) -> DataFrame | None:
        """The records of the cycle ``[lo, hi)`` (query id, row, ``_ts``, ``_te``, ``_op``)
        from ``new``, the elements starting in it (query id, row, ``_ts``, ``_te``), and the
        layers whose ends lie in it; None when nothing starts or ends.
        """
        runs = self.layers
        runs.expire(lo)
        runs.merge(lo)
        ending = runs.read([r for r in runs.runs if r.ends_within(lo, hi)])
        if new is None and ending is None:
            return None
        live = runs.live()
        assert live is not None or new is not None
        views: dict[str, DataFrame] = {}
        if new is not None:  # read four times: found once
            new = views["new"] = self.rt.cache_for_cycle(new)
        if ending is not None:
            views["ending"] = ending
        if live is not None:
            views["live"] = live
            base = self.views.sql(_base_sql(self.row, tuple(sorted(views)), lo, hi), **views)
            base = self.rt.cache_for_cycle(base)
        else:
            base = None
        frames = _present(new=new, base=base)
        changes = self.union(_changes_texts(self.row, hi), frames)
        records, still_open = coalesced(self.rt, self.views, changes, [QID, self.row], base)
        if hi == TIME_MAX:  # the input ended: every layer closed
            runs.clear()
            return records
        ends = self.union(_ends_texts(self.row, hi), frames)
        runs.add(self.views.sql(_assigned_sql(self.row), open=still_open, ends=ends))
        return records

    def union(self, texts: tuple[tuple[str, str], ...],
              frames: dict[str, DataFrame]) -> DataFrame:
        """The union of the ``texts`` whose view is among ``frames`` (one at least is)."""
        parts = [self.views.sql(text, **{view: frames[view]}) for text, view in texts
                 if view in frames]
        return parts[0] if len(parts) == 1 else union_by_name(parts)

    # -- what it holds ------------------------------------------------------------------------
    @property
    def state_rows(self) -> int:
        """Layers held (those whose commit ran)."""
        return self.layers.rows

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the runs under ``path`` (a manifest; runs made since the last checkpoint)."""
        self.layers.save(path, frames)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore what ``save`` saved."""
        self.layers.load(path, frames)

    def release(self) -> None:
        """Hold nothing (the query stopped)."""
        self.layers.clear()


def _present(**frames: DataFrame | None) -> dict[str, DataFrame]:
    """The frames that exist, by view name."""
    return {name: df for name, df in frames.items() if df is not None}


def _base_sql(row: str, views: tuple[str, ...], lo: int, hi: int) -> str:
    """The open layers at ``lo`` of the values the cycle touches (a new element, or a layer
    ending in the cycle), each (value, layer, start) with its latest provisional end.
    The touched values are the small side: the runs stream through their hash table.
    """
    low, high = bound_sql(lo), bound_sql(hi)
    touched = " UNION ".join(
        [f"SELECT {QID}, {q(row)} FROM {{new}}"] * ("new" in views)
        + [f"SELECT {QID}, {q(row)} FROM {{ending}} WHERE {END} >= {low} AND {END} < {high}"]
        * ("ending" in views))
    return (f"SELECT /*+ SHUFFLE_HASH(t) */ l.{QID}, l.{q(row)}, l.{LAYER}, l.{TS}, "
            f"max(l.{END}) AS {END} FROM (SELECT * FROM {{live}} WHERE {END} >= {low}) AS l "
            f"LEFT SEMI JOIN ({touched}) AS t ON l.{QID} = t.{QID} AND l.{q(row)} = "
            f"t.{q(row)} GROUP BY l.{QID}, l.{q(row)}, l.{LAYER}, l.{TS}")


def _changes_texts(row: str, hi: int) -> tuple[tuple[str, str], ...]:
    """The cycle's changes of the touched values, as (text, the view it reads): +1 where a
    new element starts, -1 where one ends before ``hi`` (view ``{new}``), and -1 where a
    kept layer's provisional end lies before ``hi`` (view ``{base}``).
    """
    high = bound_sql(hi)
    key = f"{QID}, {q(row)}"
    return ((f"SELECT {key}, {TS} AS {q(T)}, CAST(1 AS BIGINT) AS {q(D)} FROM {{new}}", "new"),
            (f"SELECT {key}, {TE} AS {q(T)}, CAST(-1 AS BIGINT) AS {q(D)} FROM {{new}} "
             f"WHERE {TE} < {high}", "new"),
            (f"SELECT {key}, {END} AS {q(T)}, CAST(-1 AS BIGINT) AS {q(D)} FROM {{base}} "
             f"WHERE {END} < {high}", "base"))


def _ends_texts(row: str, hi: int) -> tuple[tuple[str, str], ...]:
    """The ends at or after ``hi`` of the touched values' live elements, as (text, view):
    of the new ones (``{new}``), and the kept layers' provisional ends (``{base}``).
    """
    high = bound_sql(hi)
    key = f"{QID}, {q(row)}"
    return ((f"SELECT {key}, {TE} AS {END} FROM {{new}} WHERE {TE} >= {high}", "new"),
            (f"SELECT {key}, {END} FROM {{base}} WHERE {END} >= {high}", "base"))


@lru_cache(maxsize=64)
def _assigned_sql(row: str) -> str:
    """The open layers (view ``{open}``) each with its provisional end (view ``{ends}``):
    per value, the top layer with the earliest end, the bottom one with the latest.
    """
    key = f"{QID}, {q(row)}"
    return (f"SELECT o.{QID}, o.{q(row)}, o.{LAYER}, o.{TS}, e.{END} FROM "
            f"(SELECT *, row_number() OVER (PARTITION BY {key} ORDER BY {LAYER} DESC) "
            f"AS {RANK} FROM {{open}}) AS o JOIN "
            f"(SELECT *, row_number() OVER (PARTITION BY {key} ORDER BY {END}) AS {RANK} "
            f"FROM {{ends}}) AS e ON o.{QID} = e.{QID} AND o.{q(row)} = e.{q(row)} "
            f"AND o.{RANK} = e.{RANK}")
