"""The contract every physical operator follows."""

from __future__ import annotations

from typing import ClassVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from sparkcq.errors import PlanError
from sparkcq.plan.nodes import PlanNode
from sparkcq.runtime.frames import D, Runtime, Slice, StateFrame, T, col, split_at, union_all
from sparkcq.runtime.transaction import CycleParticipant


class ContentsUnknownError(PlanError):
    """An operator keeps no state from which its current output relation can be rebuilt."""


def as_changes_at(df: DataFrame, names: list[str], count: str | None, at: int) -> DataFrame:
    """Rows (with a multiplicity column ``count``, or 1 each) as +n changes at ``at``."""
    n = col(count) if count else F.lit(1)
    return df.select(*[col(c) for c in names], F.lit(at).cast("long").alias(T),
                     n.cast("long").alias(D))


class Operator(CycleParticipant):
    """A physical operator: turns its inputs' slices of one cycle into its output slice.

    Operators are created once per plan node and live across cycles; ``step`` is called once
    per cycle in topological order. State is held in ``StateFrame``s so it lives in Spark.
    """

    # what a cycle changes on the driver; a subclass adds its own (``CycleTransaction``)
    CYCLE_FIELDS: ClassVar[tuple[str, ...]] = (
        "position", "seeded_inputs", "unread", "plan_seconds", "rows_out", "rows_out_total",
        "cycles")
    contents_from_inputs = False  # ``contents`` maps its inputs' contents (stateless ops)
    reads_inputs_unread = True  # ``pass_unread`` still reads its inputs' slices

    def __init__(self, node: PlanNode, rt: Runtime):
        self.node = node
        self.rt = rt
        self.states: list[StateFrame] = []
        self.plan_seconds = 0.0  # time spent building this cycle's plan (driver side)
        self.rows_out: int | None = 0  # rows of the last cycle's output (None: not counted)
        self.unread = False  # the last cycle computed no output: no one read it (fused)
        self.rows_out_total = 0
        self.cycles = 0
        self.position: int | None = None  # hi of the last slice this operator emitted
        # inputs a newly added operator starts from the (shared) child's current contents
        self.seeded_inputs: frozenset[int] = frozenset()

    def state(self, schema, name: str,  # noqa: ANN001 - a StructType
              partition_by: str | None = None) -> StateFrame:
        """Create a state frame owned by this operator (counted in metrics, checkpointed)."""
        frame = StateFrame(self.rt, schema, f"{type(self).__name__}-{len(self.states)}-{name}",
                           partition_by)
        self.states.append(frame)
        return frame

    def cycle_states(self) -> list[StateFrame]:  # noqa: D102
        return self.states

    def counted(self, rows: int | None) -> None:
        """The commit counted this cycle's output rows (None: it built the output inside
        its consumers' plans and did not count it, see ``RowCounting``).
        """
        self.rows_out = rows
        if rows is not None:
            self.rows_out_total += rows
            self.cycles += 1

    @property
    def state_rows(self) -> int:
        """Rows held in this operator's state now (live elements, groups, buffers)."""
        return sum(s.rows for s in self.states)

    @property
    def live_instances(self) -> int | None:
        """User aggregate instances held now, or None for an operator that runs none."""
        return None

    def input_nodes(self) -> tuple[PlanNode, ...]:
        """The plan nodes whose slices ``step`` receives: the node's children, unless the
        operator reads past them (a fused aggregate reads its family's input).
        """
        return self.node.children

    def step(self, inputs: list[Slice]) -> Slice:
        """Process one cycle's input slices and return the output slice."""
        raise NotImplementedError(type(self).__name__)

    def pass_unread(self, inputs: list[Slice]) -> Slice:
        """Go through a cycle whose output no one reads (a query's output is computed
        from a fused family's result instead): state is kept up to date, no output is built.
        Stateful operators step as usual; stateless ones override this to do nothing.
        """
        return self.step(inputs)

    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The output relation's current contents as +n changes at instant ``at``.

        ``children`` are the inputs' contents in the same form (None: empty). A stateful
        operator answers from its state; a stateless one maps its inputs' contents. The
        global plan uses it to start a new query above a shared relation (DESIGN 4.2).
        """
        msg = f"{self.node.label()} cannot tell its current contents"
        raise ContentsUnknownError(msg)

    def save(self, path: str) -> None:
        """Write the operator's state under ``path`` (a checkpoint at a cycle boundary)."""
        for frame in self.states:
            frame.save(path)

    def load(self, path: str) -> None:
        """Restore what ``save`` wrote."""
        for frame in self.states:
            frame.load(path)

    def release(self) -> None:
        """Free all state (the operator leaves the plan)."""
        for s in self.states:
            s.set(None)


class FutureBuffer:
    """Holds changes an operator produced ahead of its watermark until their instant is due.

    A window knows at insertion that an element leaves at ``ts + w``; that -1 change waits
    here, so the buffer holds exactly the live elements and is reorganised as time passes.
    """

    def __init__(self, op: Operator, schema, name: str = "future"):  # noqa: ANN001
        self.frame = op.state(schema, name)
        self.rt = op.rt

    def emit(self, produced, lo: int, hi: int) -> Slice:  # noqa: ANN001 - DataFrame | None
        """Merge ``produced`` with buffered changes; return those due before ``hi``."""
        buffered = self.frame.get()
        due_later = self.frame.min_t is not None and self.frame.min_t >= hi
        if produced is None and (buffered is None or due_later):
            return Slice(None, lo, hi)
        merged = union_all([buffered, produced])
        assert merged is not None
        merged = self.rt.cache_for_cycle(merged)
        due, later = split_at(merged, hi)
        self.frame.set(later)
        return Slice(due, lo, hi)


__all__ = ["D", "T", "ContentsUnknownError", "FutureBuffer", "Operator", "as_changes_at"]
