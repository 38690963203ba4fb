"""What a query with ``on_error='skip'`` does when it fails a cycle: find the input rows it
raised on, send them to their stream's dead letters with the error, leave them out of its
input from now on (``runtime/operators/quarantine.py``), and run the cycle again.

The rows are found among the rows its streams deliver in the cycle (the batch and the
rows held for a later cycle) by evaluating its row-level expressions on them: the filters
and projections above each stream, through windows (which do not change a row's values),
up to the first aggregate, join or table function. A set of rows that raises is halved
until single rows remain: a Spark job per half, on the failure path only. A failure no
single row explains (an aggregate that overflows, a user aggregate or table function)
finds nothing, and the query stops as without the policy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from sparkcq.model.columns import RAW, REASON
from sparkcq.plan.nodes import Filter, PlanNode, Project, Quarantine, Window
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.failures import describe_failure
from sparkcq.runtime.frames import Slice, SqlViews, col, union_all
from sparkcq.runtime.operators.base import CycleContext
from sparkcq.runtime.operators.quarantine import QuarantineOperator
from sparkcq.runtime.operators.scan import ScanOperator
from sparkcq.runtime.step_chains import chain_sql

#: rows a cycle may skip for one query; more, and it is stopped (its input, not a few rows,
#: is what it cannot take)
MOST_SKIPPED = 100
#: rows searched at most for the ones a query raised on
MOST_SEARCHED = 200_000

Chain = tuple[Filter | Project, ...]


@dataclass(frozen=True)
class Skipped:
    """The rows of one stream a query raised on, with each one's error."""

    stream: str
    rows: pa.Table
    errors: tuple[str, ...]


def logical_nodes(plan: PlanNode) -> list[PlanNode]:
    """Every node of ``plan`` and of the logical plans its specialised nodes replace (an
    interval join's join, a sliced aggregate's aggregate: their filters and projections
    run inside them).
    """
    seen: dict[PlanNode, None] = {}

    def visit(node: PlanNode) -> None:
        if node in seen:
            return
        seen[node] = None
        for f in fields(node):
            value = getattr(node, f.name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, PlanNode):
                    visit(v)

    visit(plan)
    return list(seen)


def row_level_chains(plan: PlanNode) -> dict[Quarantine, list[Chain]]:
    """For each stream a query reads (its ``Quarantine`` nodes), the chains of filters and
    projections above it, through windows, lowest first: every row-level expression the
    query evaluates on that stream's rows.
    """
    nodes = logical_nodes(plan)
    parents: dict[PlanNode, list[PlanNode]] = {}
    for node in nodes:
        for child in node.children:
            parents.setdefault(child, []).append(node)
    def up(n: PlanNode, steps: Chain) -> list[Chain]:
        found: list[Chain] = []
        for parent in parents.get(n, []):
            if isinstance(parent, Filter | Project):
                found += [(*steps, parent), *up(parent, (*steps, parent))]
            elif isinstance(parent, Window):
                found += up(parent, steps)
        return found

    return {node: list(dict.fromkeys(up(node, ())))
            for node in nodes if isinstance(node, Quarantine)}


def raises(spark: SparkSession, views: SqlViews, chains: list[Chain], schema,  # noqa: ANN001
           ) -> Callable[[pa.Table], BaseException | None]:
    """A function telling whether the chains raise on some rows (the error, or None)."""
    def check(rows: pa.Table) -> BaseException | None:
        df = spark.createDataFrame(rows.to_pandas(), schema)
        for steps in chains:
            try:
                # every column of every row computed: Spark's no-op sink writes nothing
                views.sql(f"SELECT * FROM {chain_sql('{inp}', steps, ())}", inp=df) \
                    .write.format("noop").mode("overwrite").save()
            except Exception as e:  # noqa: BLE001 - whatever the expression raised
                return e
        return None

    return check


def failing_rows(rows: pa.Table, fails: Callable[[pa.Table], BaseException | None]
                 ) -> list[tuple[int, BaseException]] | None:
    """The rows of ``rows`` that fail on their own, each with its error, found by halving;
    None when more than ``MOST_SKIPPED`` do.
    """
    out: list[tuple[int, BaseException]] = []

    def search(lo: int, hi: int, error: BaseException) -> bool:
        if hi - lo == 1:
            out.append((lo, error))
            return len(out) <= MOST_SKIPPED
        mid = (lo + hi) // 2
        for a, b in ((lo, mid), (mid, hi)):
            e = fails(rows.slice(a, b - a))
            if e is not None and not search(a, b, e):
                return False
        return True

    first = fails(rows) if rows.num_rows else None
    if first is not None and not search(0, rows.num_rows, first):
        return None
    return out


def candidates(scan: ScanOperator, taken: CycleInput, left_out: QuarantineOperator
               ) -> DataFrame | None:
    """The rows the stream delivers in the cycle (its batch and the rows it holds) that
    the query does not leave out already.
    """
    names = [col(f.name) for f in scan.scan.schema.fields]
    held = [h.frame.where(col(REASON).isNull()).select(*names) for h in scan.progress.held]
    batch = taken.batch(scan.scan).df
    rows = union_all([*held, None if batch is None else batch.select(*names)])
    return None if rows is None else left_out.step([Slice(rows, 0, 0)], CycleContext()).df


def skip_failing_rows(query: str, plan: PlanNode, taken: CycleInput,
                      operator: Callable[[PlanNode], object], spark: SparkSession
                      ) -> list[Skipped] | None:
    """Find, dead-letter and leave out the rows query ``query`` raised on in the cycle
    ``taken``; what was skipped, or None when no row (or too many) explains the failure.
    """
    views = SqlViews(spark, "skip")
    skipped = []
    for node, chains in row_level_chains(plan).items():
        scan, held = operator(node.child), operator(node)
        assert isinstance(scan, ScanOperator) and isinstance(held, QuarantineOperator)
        rows = candidates(scan, taken, held) if chains else None
        if rows is None:
            continue
        table = rows.limit(MOST_SEARCHED + 1).toArrow()
        if table.num_rows > MOST_SEARCHED:
            return None
        found = failing_rows(table, raises(spark, views, chains, scan.scan.schema))
        if found is None:
            return None
        if not found:
            continue
        bad = table.take(pa.array([i for i, _e in found], type=pa.int64()))
        errors = tuple(describe_failure(e) for _i, e in found)
        rows_left_out = bad.to_pandas()
        held.leave_out(spark.createDataFrame(rows_left_out, scan.scan.schema))
        letters = rows_left_out.assign(**{REASON: [f"query {query!r} raised: {e}"
                                                   for e in errors], RAW: None})
        scan.keep_dead(spark.createDataFrame(letters, scan.dead_schema), len(found))
        skipped.append(Skipped(scan.scan.name, bad, errors))
    return skipped or None
