"""The contract every physical operator follows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from sparkcq.errors import PlanError
from sparkcq.model.columns import D, T
from sparkcq.plan.nodes import EdgeKind, PlanNode, Window
from sparkcq.runtime.cycle_input import CycleInput
from sparkcq.runtime.frames import (
    HeldState,
    Runtime,
    Slice,
    StateFrame,
    col,
    split_at,
    union_all,
)
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter
from sparkcq.runtime.state_runs import StateRuns
from sparkcq.runtime.transaction import CycleParticipant

if TYPE_CHECKING:
    from sparkcq.runtime.families import Family


class ContentsUnknownError(PlanError):
    """An operator keeps no state from which its current output relation can be rebuilt."""


def as_changes_at(df: DataFrame, names: list[str], count: str | None, at: int) -> DataFrame:
    """Rows (with a multiplicity column ``count``, or 1 each) as +n changes at ``at``."""
    n = col(count) if count else F.lit(1)
    return df.select(*[col(c) for c in names], F.lit(at).cast("long").alias(T),
                     n.cast("long").alias(D))


@dataclass(frozen=True)
class Start:
    """The contents a seeded input starts from: its relation's rows as +n changes at ``at``,
    the relation's position when they were taken.

    Changes *at* ``at`` are still to come, so the start is only due in a cycle whose slice of
    that input passes ``at``: then it meets them (a row leaving at ``at`` cancels its +1).
    Applied in a cycle where the input stays at ``at``, the new query would emit rows at
    ``at`` before ``at`` is final.
    """

    df: DataFrame | None
    at: int


#: the starts of a cycle, by (id of the consuming operator, input index)
Starts = Mapping[tuple[int, int], Start]


@dataclass
class CycleContext:
    """What one attempt at a cycle gives every step besides its input slices: made by the
    cycle engine for that attempt and dropped after it, never kept by an operator.
    """

    input: CycleInput = field(default_factory=CycleInput)  # the scans' batches
    only: frozenset[PlanNode] | None = None  # the nodes this attempt evaluates (None: all)
    # a rebuilt aggregate family's start, by id of the family (``runtime/fusion.py``)
    family_starts: Mapping[int, Start] = field(default_factory=dict)
    # what a family computed for its members in this cycle, by id of the family: each
    # member reads it, the family computes it once
    evaluations: dict[int | tuple[int, bool], Any] = field(default_factory=dict)
    # nodes whose change edge (``Slice.df``) nothing reads in this attempt: an operator
    # that can gives only its segments or arrivals, and spends no driver time on the edge
    edges_unread: frozenset[PlanNode] = frozenset()
    # scans whose batch one operator reads once, through its arrivals, and nothing else:
    # the batch need not be cached (``ScanOperator.accept``)
    read_once: frozenset[PlanNode] = frozenset()


@dataclass(frozen=True)
class Progress:
    """Where an operator stands between cycles, on the driver: the record a cycle's
    transaction keeps and a rollback puts back (subclasses add their own fields).
    """

    position: int | None = None  # hi of the last slice it emitted (None: never stepped)
    # inputs starting from a shared relation's contents whose start is not
    # due yet: the slice of that input has not passed the start's position
    waiting: frozenset[int] = frozenset()


class Operator(CycleParticipant):
    """A physical operator: turns its inputs' slices of one cycle into its output slice.

    Operators are created once per plan node and live across cycles; ``advance`` is called
    once per cycle in topological order. State is held in ``StateFrame``s so it lives in
    Spark; what it keeps on the driver is its ``progress`` record, which only the operator
    replaces.
    """

    contents_from_inputs = False  # ``contents`` maps its inputs' contents (stateless ops)
    reads_inputs_unread = True  # ``pass_unread`` still reads its inputs' slices
    # a member of a family (``runtime/families.py``): the family that holds its state
    family: Family | None = None

    def __init__(self, node: PlanNode, rt: Runtime):
        self.node = node
        self.rt = rt
        self.states: list[HeldState] = []
        self.progress: Progress = Progress()

    @property
    def position(self) -> int | None:
        """Where the operator stands: the hi of its last slice (None: it has not stepped)."""
        return self.progress.position

    @property
    def has_run(self) -> bool:
        """Whether the operator's relation runs already (it has stepped)."""
        return self.position is not None

    def state(self, schema, name: str,  # noqa: ANN001 - a StructType
              partition_by: str | None = None) -> StateFrame:
        """Create a state frame owned by this operator (counted in metrics, checkpointed)."""
        frame = StateFrame(self.rt, schema, f"{type(self).__name__}-{len(self.states)}-{name}",
                           partition_by)
        self.states.append(frame)
        return frame

    def state_runs(self, schema: StructType, name: str, starts: str, ends: str,
                   keys: Sequence[str] = (), span: int | None = None) -> StateRuns:
        """Create event-time state kept as runs, owned by this operator (``StateRuns``)."""
        runs = StateRuns(self.rt, schema, f"{type(self).__name__}-{len(self.states)}-{name}",
                         starts, ends, keys, span)
        self.states.append(runs)
        return runs

    def cycle_states(self) -> list[HeldState]:  # noqa: D102
        return self.states

    @property
    def state_rows(self) -> int:
        """Rows held in this operator's state now (live elements, groups, buffers)."""
        return sum(s.rows for s in self.states)

    @property
    def live_instances(self) -> int | None:
        """User aggregate instances held now, or None for an operator that runs none."""
        return None

    def shedding_report(self) -> dict[str, Any] | None:
        """What the operator sheds (``docs/shedding.md``), or None for one that sheds nothing."""
        return None

    def reads_edge(self, i: int, own_edge_read: bool) -> bool:
        """Whether ``step`` reads input ``i``'s change edge (``Slice.df``), given whether
        its own edge is read; one that reads only a stream's ``arrivals`` or a relation's
        segments does not, so its input need not build the edge.
        """
        return True

    def input_nodes(self) -> tuple[PlanNode, ...]:
        """The plan nodes whose slices ``step`` receives: the node's children, unless the
        operator reads past them (a fused aggregate reads its family's input).
        """
        return self.node.children

    # -- between statements --------------------------------------------------------------
    def await_starts(self, seeded: frozenset[int]) -> None:
        """Start inputs ``seeded`` from their relations' contents (a new operator above a
        running shared one), in the first cycle whose slice passes them.
        """
        self.progress = replace(self.progress, waiting=seeded)

    def resume_at(self, position: int | None) -> None:
        """Stand at ``position``: a rebuilt operator carries on from its predecessor's."""
        self.progress = replace(self.progress, position=position)

    def resumed(self) -> None:
        """The state was restored from a checkpoint: carry on, do not start fresh."""

    # -- the cycle -----------------------------------------------------------------------
    def advance(self, inputs: list[Slice], cycle: CycleContext, starts: Starts,
                unread: bool = False) -> Slice:
        """Go through one cycle: inputs preceded by the starts due in it (``with_start``),
        ``step`` (or ``pass_unread`` when no one reads the output), the new position.
        """
        fed = [self.with_start(s, i, starts) for i, s in enumerate(inputs)]
        out = self.pass_unread(fed, cycle) if unread else self.step(fed, cycle)
        self.progress = replace(self.progress, position=out.hi,
                                waiting=self.waiting_starts(inputs, starts))
        return out

    def step(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """Process one cycle's input slices and return the output slice."""
        raise NotImplementedError(type(self).__name__)

    def pass_unread(self, inputs: list[Slice], cycle: CycleContext) -> Slice:
        """Go through a cycle whose output no one reads (a query's output is computed
        from a fused family's result instead): state is kept up to date, no output is built.
        Stateful operators step as usual; stateless ones override this to do nothing.
        """
        return self.step(inputs, cycle)

    def with_start(self, inp: Slice, i: int, starts: Starts) -> Slice:
        """``inp`` preceded by the contents input ``i`` starts from, if it is seeded and
        ``inp`` passes the position they were taken at (see ``Start``).

        A stream's start is the events its scan holds, for a consumer of its arrivals: they
        go with the arrivals; while the start waits, so do the arrivals (the scan holds
        them, and the start taken next cycle has them). A window's start is the events of
        its reach before ``at``: they go with the edge, and the window starts their
        elements at ``at``.
        """
        start = starts.get((id(self), i)) if i in self.progress.waiting else None
        if start is None:
            return inp
        stream = self.input_nodes()[i].kind is EdgeKind.STREAM
        if inp.hi <= start.at:
            return replace(inp, arrivals=None) if stream else inp
        if isinstance(self.node, Window):  # events before ``at``: started at ``at``
            return replace(inp, df=union_all([start.df, inp.df]))
        if stream:
            return replace(inp, arrivals=union_all([start.df, inp.arrivals]))
        return replace(inp, df=union_all([start.df, inp.df]), coalesced=False)

    def waiting_starts(self, inputs: list[Slice], starts: Starts) -> frozenset[int]:
        """The seeded inputs whose start is not yet due: their slice stayed at the start's
        position this cycle, so the operator starts from the contents a cycle later.
        """
        return frozenset(i for i in self.progress.waiting
                         if (start := starts.get((id(self), i))) is not None
                         and inputs[i].hi <= start.at)

    # -- contents and checkpoints --------------------------------------------------------
    def contents(self, children: list[DataFrame | None], at: int) -> DataFrame | None:
        """The output relation's current contents as +n changes at instant ``at``.

        ``children`` are the inputs' contents in the same form (None: empty). A stateful
        operator answers from its state; a stateless one maps its inputs' contents. The
        global plan uses it to start a new query above a shared relation
        (``docs/architecture.md``, "Sharing, and starting from shared state").
        """
        msg = f"{self.node.label()} cannot tell its current contents"
        raise ContentsUnknownError(msg)

    def save(self, path: str, frames: FrameWriter) -> None:
        """Save the operator's state under ``path`` (a checkpoint at a cycle boundary)."""
        for frame in self.states:
            frame.save(path, frames)

    def load(self, path: str, frames: FrameReader) -> None:
        """Restore what ``save`` saved."""
        for frame in self.states:
            frame.load(path, frames)

    def release(self) -> None:
        """Free all state (the operator leaves the plan)."""
        for s in self.states:
            s.release()


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


__all__ = ["ContentsUnknownError", "CycleContext", "FutureBuffer", "Operator", "Progress",
           "Start", "Starts", "as_changes_at"]
