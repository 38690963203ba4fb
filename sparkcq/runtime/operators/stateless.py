"""Filter, project and expand: applied to each change as it flows, no state, fused by Spark."""

from __future__ import annotations

from pyspark.sql import DataFrame

from sparkcq.model.columns import FROM, TE, TO, TS, D, T
from sparkcq.plan.nodes import EdgeKind, Expand, Filter, Project
from sparkcq.runtime.frames import Runtime, Slice, col, project, q
from sparkcq.runtime.operators.base import CycleContext, Operator


class StatelessOperator(Operator):
    """An operator mapping each change on its own: nothing to do in a cycle no one reads."""

    contents_from_inputs = True
    reads_inputs_unread = False

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        return Slice(None, inputs[0].lo, inputs[0].hi, ended_at=inputs[0].ended_at)

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:  # noqa: D102
        return own_edge_read


class FilterOperator(StatelessOperator):
    """Keeps the changes whose row satisfies the predicate (snapshot-reducible as is)."""

    def __init__(self, node: Filter, rt: Runtime):
        super().__init__(node, rt)
        self.predicate = node.predicate.sql

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None and inp.segments is None and inp.elements is None:
            return inp
        # a re-bound text rather than a DataFrame call, which Spark analyses every cycle
        segments = (None if inp.segments is None
                    else project(inp.segments, "*", where=self.predicate))
        edge = None if inp.df is None else project(inp.df, "*", where=self.predicate)
        elements = (None if inp.elements is None
                    else project(inp.elements, "*", where=self.predicate))
        return Slice(edge, inp.lo, inp.hi, segments, coalesced=inp.coalesced,
                     ended_at=inp.ended_at, elements=elements)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:  # noqa: D102
        return self.step([Slice(children[0], at, at + 1)], CycleContext()).df


class ProjectOperator(StatelessOperator):
    """Computes the output columns of each change; time and multiplicity pass through."""

    def __init__(self, node: Project, rt: Runtime):
        super().__init__(node, rt)
        self.exprs = [f"{e.sql} AS {q(name)}" for name, e in node.exprs]
        # every input column kept as it is: distinct input rows stay distinct
        self.injective = {f"`{f.name}`" for f in node.child.schema.fields} <= {
            e.sql for _name, e in node.exprs}

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None and inp.segments is None and inp.elements is None:
            return inp
        if self.node.kind is EdgeKind.TABLE:
            assert inp.df is not None
            return Slice(project(inp.df, *self.exprs), inp.lo, inp.hi)
        segments = None if inp.segments is None else project(
            inp.segments, *self.exprs, q(FROM), q(TO))
        edge = None if inp.df is None else project(inp.df, *self.exprs, q(T), q(D))
        elements = None if inp.elements is None else project(
            inp.elements, *self.exprs, q(TS), q(TE))
        return Slice(edge, inp.lo, inp.hi, segments,
                     coalesced=inp.coalesced and self.injective, ended_at=inp.ended_at,
                     elements=elements)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:  # noqa: D102
        return self.step([Slice(children[0], at, at + 1)], CycleContext()).df


class ExpandOperator(StatelessOperator):
    """Each change of a counted row as that many changes of the row: +1 of (v, n) at t is
    +n of v at t (snapshot-reducible: a snapshot's counted rows become their copies).
    """

    def __init__(self, node: Expand, rt: Runtime):
        super().__init__(node, rt)
        self.names = [col(f.name) for f in node.schema.fields]
        self.count = col(node.count)

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:  # noqa: D102
        (inp,) = inputs
        if inp.df is None:
            return Slice(None, inp.lo, inp.hi, ended_at=inp.ended_at)
        edge = inp.df.select(*self.names, col(T), (col(D) * self.count).alias(D))
        return Slice(edge, inp.lo, inp.hi, ended_at=inp.ended_at)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:  # noqa: D102
        return self.step([Slice(children[0], at, at + 1)], CycleContext()).df
