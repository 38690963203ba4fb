"""Tables whose rows are replaced while queries read them: which joins switch, and how.

A table is static between replacements; the catalog replaces its rows (``REFRESH TABLE``,
``Engine.load_table``) and the running joins that read it switch in the next cycle, at
their position, as if the new rows had been there from that instant on
(``docs/semantics.md``, "Tables that change"). Functions of the global plan they read
(``runtime/global_plan.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame

from sparkcq.plan.nodes import EdgeKind, Join, PlanNode, TableScan, walk
from sparkcq.runtime.operators.base import ContentsUnknownError
from sparkcq.runtime.operators.join import JoinOperator
from sparkcq.runtime.operators.table import TableOperator, TableRows
from sparkcq.runtime.seeding import contents, table_rows

if TYPE_CHECKING:
    from sparkcq.runtime.global_plan import GlobalPlan


def table_readers(plan: GlobalPlan, table: PlanNode) -> tuple[list[Join], list[PlanNode]]:
    """The joins that read ``table`` with a relation (through filters, projections and
    joins of tables, which are tables too), and the other nodes that read it: an aggregate
    or a union of a table, which nothing switches to new rows.
    """
    static = {n for n in plan.ops if n.kind is EdgeKind.TABLE and table in walk(n)}
    joins: list[Join] = []
    others: list[PlanNode] = []
    for node in plan.ops:
        if node.kind is EdgeKind.TABLE or not static.intersection(node.children):
            continue
        if isinstance(node, Join) and sum(c.kind is EdgeKind.TABLE
                                          for c in node.children) == 1:
            joins.append(node)
        else:
            others.append(node)
    return joins, others


def table_versions(plan: GlobalPlan) -> dict[PlanNode, int]:
    """The version of the rows each table operator serves."""
    return {n: op.version for n, op in plan.ops.items() if isinstance(op, TableOperator)}


def switched_at(plan: GlobalPlan, query_plan: PlanNode, table: TableScan,
                version: int) -> list[int]:
    """Where the joins of a query's plan switched to ``version`` of ``table``'s rows."""
    nodes = set(walk(query_plan))
    joins = [op for join in table_readers(plan, table)[0]
             if join in nodes and isinstance(op := plan.ops[join], JoinOperator)]
    return sorted({at for op in joins for t, v, at in op.tables
                   if t == table.name and v == version})


def replacement_problems(plan: GlobalPlan, table: str) -> list[tuple[str, str]]:
    """Why running queries could not follow new rows of the table called ``table``:
    ``(query, reason)`` for each node that reads it other than in a join with a relation,
    and for each join whose relation keeps no copy of the rows it joined.
    """
    problems: list[tuple[str, str]] = []
    scans = [n for n in plan.ops if isinstance(n, TableScan) and n.name.lower() == table.lower()]
    for scan in scans:
        joins, others = table_readers(plan, scan)
        for node in others:
            why = (f"it reads the table in {node.label()!r}, which would keep what it read "
                   "of the old rows (only a join with a stream or relation switches to new "
                   "rows)")
            problems += [(q, why) for q in sorted(plan.users.get(node, ()))]
        for join in joins:
            try:
                switch_contents(plan, join)
            except ContentsUnknownError as e:
                why = (f"it joins the table with rows of which no copy is kept ({e}), so "
                       "what it joined with the old rows cannot be joined with the new "
                       "ones; a time window on the stream ([RANGE ...], [NOW], [ROWS n]) "
                       "would let it switch")
                problems += [(q, why) for q in sorted(plan.users.get(join, ()))]
    return problems


def switch_contents(plan: GlobalPlan, join: Join) -> DataFrame | None:
    """What a running join emitted of its dynamic input, as the contents at its position
    that a switch to a replaced table's new rows re-joins (None: nothing to switch, it has
    not started); raises ContentsUnknownError when the input keeps no copy of its rows.
    """
    op = plan.ops[join]
    assert isinstance(op, JoinOperator)
    if op.position is None or op.dynamic in op.progress.waiting:
        return None  # its dynamic input starts later, joined with the rows then served
    if join.children[op.dynamic].kind is EdgeKind.STREAM:
        return None  # events: each met the rows served when it came, none is still live
    return contents(plan, join.children[op.dynamic], op.position)


def replace_tables(plan: GlobalPlan, tables: Mapping[PlanNode, TableRows],
                   nodes: frozenset[PlanNode] | None = None) -> None:
    """Switch every table (of ``nodes``) whose rows the catalog replaced to its new
    ``tables`` rows, in the cycle's transaction, before any operator steps.

    Each running join reading a switched table emits at its position ``p`` (the instant
    before which it emitted everything) -(its dynamic input's contents at ``p`` ⋈ the old
    rows) +(... ⋈ the new rows); its changes from ``p`` on meet the new rows. The contents
    are taken before the switch, as consumers' starts are.
    """
    ops = {n: op for n, op in plan.ops.items() if nodes is None or n in nodes}
    for op in ops.values():
        if isinstance(op, TableOperator):
            op.retire()
    due = [n for n, rows in tables.items()
           if isinstance(table := ops.get(n), TableOperator) and not table.serves(rows)]
    if not due:
        return
    joins = [j for j in dict.fromkeys(j for n in due for j in table_readers(plan, n)[0])
             if j in ops]
    before = {join: (switch_contents(plan, join), table_rows(plan, static_side(join)))
              for join in joins}
    for node in due:
        table_op = plan.ops[node]
        assert isinstance(table_op, TableOperator)
        table_op.switch(tables[node])
    for join in joins:
        op = plan.ops[join]
        assert isinstance(op, JoinOperator)
        rows, old = before[join]
        static = static_side(join)
        new = table_rows(plan, static)
        if op.position is None or old is None or new is None:
            continue
        versions = tuple((n.name, served.version) for n in walk(static)
                         if isinstance(n, TableScan)
                         and isinstance(served := plan.ops[n], TableOperator))
        op.replace_table(rows, old, new, op.position, versions)


def static_side(join: Join) -> PlanNode:
    """The table input of a join of a relation with a table."""
    return join.children[0] if join.children[0].kind is EdgeKind.TABLE else join.children[1]
