"""A stream's time chunks joined with an aggregate over the same chunks, chunk by chunk.

``ChunkJoin`` (made by ``plan/rules/join_aligned_chunks.py``): the left side is a stream cut
into chunks ``[cut - by, cut)`` whose rows hold from the cut point ``cut`` for one chunk;
the right input is a sliced aggregate over the same chunks, whose segments give each
chunk's rows over ``[cut, cut + by)``. In the cycle whose slice ``[lo, hi)`` holds ``cut``,
both sides of that chunk are complete, so the chunk's events meet the chunk's aggregate
rows (the right's segments starting at ``cut``) once:

    bids of chunk [0, 10): (a1, 7), (a2, 9), (a3, 9)     max(price) of the chunk: 9
    at cut 10: pairs (a2, 9, 9), (a3, 9, 9), each valid [10, 20)

The events are taken as they arrive (``Slice.arrivals``, through the filters and
projections above the window) and wait in runs by their cut (``StateRuns``: a cycle writes
its own events once; a chunk's run is dropped whole once it ended). The pairs' ends wait in
a future buffer, as a window's elements do, and the pairs are given as segments too, so an
RSTREAM above reads them with no state. The general join instead keeps every element of
both sides and rebuilds them from +1/-1 changes each cycle.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StructField, StructType

from sparkcq.model.columns import FROM, TO, D, T
from sparkcq.model.time import TIME_MAX, TIME_MIN
from sparkcq.plan.nodes import ChunkJoin, keyless_aggregate
from sparkcq.runtime.frames import Runtime, Slice, SqlViews, bound_sql, project, q, union_all
from sparkcq.runtime.operators.base import CycleContext, FutureBuffer, Operator
from sparkcq.runtime.step_chains import chain_sql

#: an event's chunk: the cut point it becomes valid at
CUT = "_cut"


class ChunkJoinOperator(Operator):
    """Each chunk's rows with the chunk's aggregate rows, once the chunk ends (module)."""

    def __init__(self, node: ChunkJoin, rt: Runtime):
        super().__init__(node, rt)
        self.by = node.by
        self.left = [f.name for f in node.join.left.schema.fields]
        self.right = [f.name for f in node.right.schema.fields]
        self.names = [f.name for f in node.schema.fields]
        condition = node.join.condition
        self.condition = f" AND ({condition.sql})" if condition is not None else ""
        # in a large cycle a keyless aggregate's rows (one a chunk) go to every task: the
        # chunk's events, nearly all of a cycle's input, are then joined where they were
        # read, not shuffled (a small cycle has no shuffle to save)
        self.broadcast = keyless_aggregate(node.right)
        self.views = SqlViews(rt.spark, "chunkjoin")
        t = q(T)
        events = chain_sql(f"(SELECT * FROM {{inp}} WHERE {q(D)} > 0)", node.steps(), (T, D))
        self.events_sql = (f"SELECT {', '.join(map(q, self.left))}, {q(D)}, "
                           f"{t} - pmod({t}, {self.by}) + {self.by} AS {CUT} FROM {events}")
        self.chunks = self.state_runs(StructType([
            *node.join.left.schema.fields, StructField(D, LongType()),
            StructField(CUT, LongType())]), "chunks", CUT, CUT, span=self.by)
        self.future = FutureBuffer(self, StructType([*node.schema.fields,
                                                     StructField(T, LongType()),
                                                     StructField(D, LongType())]))
        # the aggregate's segments of chunks that end after the slower input's watermark
        # (its stream ahead of the left's): they meet their chunk's events in a later cycle
        self.ahead = self.state(StructType([*node.right.schema.fields,
                                            StructField(FROM, LongType()),
                                            StructField(TO, LongType())]), "ahead")

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:
        """Neither input's changes: the stream's arrivals and the aggregate's segments."""
        return False

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        left, right = inputs
        lo = self.progress.position
        lo = lo if lo is not None else min(left.lo, right.lo)
        hi = min(left.hi, right.hi)
        self.chunks.expire(lo)
        self.chunks.merge(lo)
        if left.arrivals is not None:  # none lies behind ``lo``: nor does its cut
            self.chunks.add(self.views.sql(self.events_sql, inp=left.arrivals),
                            None if lo == TIME_MIN else lo)
        ending = self.chunks.starting_within([(lo, hi)])
        if hi == TIME_MAX:
            self.chunks.clear()
        else:
            self.chunks.expire(hi)
        buffered = self.future.frame.get()
        chunks = self._aggregate_chunks(right, hi)
        pairs = None
        if ending is not None and chunks is not None:
            pairs = self.rt.cache_for_cycle(self.views.sql(
                self._pairs_sql(lo, hi), ending=ending, right=chunks))
        produced = None
        if pairs is not None:
            cols = ", ".join(map(q, self.names))
            produced = self.views.sql(
                f"SELECT {cols}, {q(T)}, {q(D)} FROM {{pairs}} UNION ALL "
                f"SELECT {cols}, {q(T)} + {self.by} AS {q(T)}, -{q(D)} AS {q(D)} "
                "FROM {pairs}", pairs=pairs)
        out = self.future.emit(produced, lo, hi)
        live = union_all([buffered, produced])
        segments = None if live is None else self.views.sql(self._segments_sql(lo), live=live)
        return Slice(out.df, lo, hi, segments)

    def _aggregate_chunks(self, right: Slice, hi: int) -> DataFrame | None:
        """The aggregate's segments that start in its slice (a chunk's rows, new this
        cycle) with those kept from earlier cycles; those of chunks ending at or after
        ``hi`` are kept for later.
        """
        new = None
        if right.segments is not None:
            new = project(right.segments, *map(q, self.right), q(FROM), q(TO),
                          where=f"{q(FROM)} >= {bound_sql(right.lo)}")
        kept = self.ahead.get()
        chunks = union_all([kept, new])
        if kept is not None or right.hi > hi:
            # a chunk ends after ``hi`` only while the aggregate's stream is ahead: every
            # segment kept from an earlier cycle starts below the aggregate's ``hi``
            self.ahead.set(project(chunks, "*", where=f"{q(FROM)} >= {bound_sql(hi)}")
                           if chunks is not None and right.hi > hi else None)
        return chunks

    def _pairs_sql(self, lo: int, hi: int) -> str:
        """The chunks that end in [lo, hi): their events with the right's rows of the same
        chunk, each pair +n at the cut.
        """
        left = ", ".join(map(q, self.left))
        right = ", ".join(map(q, self.right))
        hint = "/*+ BROADCAST(r) */ " if self.broadcast and not self.rt.single else ""
        return (f"SELECT {hint}{left}, {right}, {CUT} AS {q(T)}, {q(D)} FROM "
                f"(SELECT * FROM {{ending}} WHERE {CUT} >= {bound_sql(lo)} "
                f"AND {CUT} < {bound_sql(hi)}) AS l JOIN "
                f"(SELECT {right}, {q(FROM)} AS _chunk FROM {{right}} "
                f"WHERE {q(FROM)} >= {bound_sql(lo)} AND {q(FROM)} < {bound_sql(hi)}) AS r "
                f"ON {CUT} = _chunk{self.condition}")

    def _segments_sql(self, lo: int) -> str:
        """The pairs live over the slice as segments ``[cut, cut + by)``, one row a copy:
        every pair whose end is still to come at ``lo``.
        """
        cols = ", ".join(map(q, self.names))
        return (f"SELECT {cols}, {q(T)} - {self.by} AS {q(FROM)}, {q(T)} AS {q(TO)} "
                f"FROM {{live}} LATERAL VIEW explode(array_repeat(1, CAST(-{q(D)} AS INT))) "
                f"AS _copy WHERE {q(D)} < 0 AND {q(T)} > {bound_sql(lo)}")

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """Live pairs: each has its -1 waiting in the future buffer."""
        buffered = self.future.frame.get()
        if buffered is None:
            return None
        cols = ", ".join(map(q, self.names))
        return self.views.sql(
            f"SELECT {cols}, CAST({bound_sql(at)} AS BIGINT) AS {q(T)}, -sum({q(D)}) AS {q(D)} "
            f"FROM {{buffered}} WHERE {q(T)} > {bound_sql(at)} GROUP BY {cols} "
            f"HAVING sum({q(D)}) < 0", buffered=buffered)
