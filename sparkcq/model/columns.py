"""The names of the columns sparkcq adds to the user's: one vocabulary for every stage.

Each begins with an underscore. Operators also use scratch columns inside one cycle's plan;
they are named here too, so two operators composed in one Spark plan never pick one name for
two things, and a reader finds what a column means in one place.
"""

from __future__ import annotations

import re

# -- an edge: a change of a relation or an event of a stream ----------------------------------
T = "_t"  # the instant of the change (LONG on the time axis)
D = "_d"  # +n: n copies of the row enter at ``_t``; -n: they leave
FROM, TO = "_from", "_to"  # an interval row (``Slice.segments``) holds over [_from, _to)

# -- records a sink receives (docs/semantics.md, "From relation to output") -----------------
TS, TE, OP = "_ts", "_te", "_op"  # element start, end (null: open), I / C / + / -
LAYER = "_layer"  # which copy of a value-equal row an open element is (coalescing)
QID, ROW = "_qid", "_row"  # the shared formatter's query id and row as JSON text
CYCLE = "_cycle"  # the cycle a PostgreSQL sink row was committed in

# -- what a source delivers (io/) and a scan keeps ---------------------------------------
REASON = "_reason"  # why a row is a dead letter (null: on time)
RAW = "_raw"  # a dead letter refused at the door: the row as it was sent
DEAD_BATCH = "_dead_batch"  # which batch of dead letters a row came in (oldest dropped first)
#: the watermark in force when a row arrived, when a source delivers several arrivals in
#: one cycle (io/sources.py MemorySource)
ARRIVAL_WATERMARK = "_arrival_watermark"
#: a keyed stream's delete (true: its key columns and event time; the rest null)
DELETE = "_delete"

# -- aggregates -----------------------------------------------------------------------
N = "_n"  # a count of rows: in a group, a pane, a window at a point, a multiset value
GROUP_HASH = "_g"  # a hash of the group keys: every frame of an aggregate is partitioned by it
AID = "_aid"  # which argument a stacked multiset row belongs to
PANE_END = "_e"  # the end of an event's pane: where it enters the window
AT = "_at"  # a point where a group's value may change
NEXT = "_nx"  # the group's next point: the end of the segment starting at ``AT``
CHANGED = "_chg"  # the row at this point (or this element) differs from the one before it
LAST = "_last"  # a group's last point of the cycle: its measures are the next base
SINCE = "_since"  # the point where the row holding at this point began
ARRIVES = "_arr"  # an OVER window's point that is an event arriving (it goes out)
#: which window a family's row belongs to, when one set of panes serves several windows
#: (``runtime/operators/sliced_aggregate.py``)
WINDOW_TAG = "_win"

# -- windows, chunks and joins ---------------------------------------------------------
NEW = "_new"  # a row of this cycle (beside rows kept from earlier ones)
DELETED = "_del"  # a keyed stream's delete as a row of its key's partition
KEY_HASH = "_kh"  # a hash of a keyed stream's key: its window's state is partitioned by it
FIRST = "_first"  # the instant of a key's first change in the cycle
INDEX, CHUNK = "_i", "_c"  # a row's place in the stream, its chunk's number
SIGN = "_sign"  # +1 a row of the new version of a replaced table, -1 one of the old
STARTS = ("_ls", "_rs")  # where an interval join's left / right element starts
ENDS = ("_le", "_re")  # and where it ends


# -- columns the plan names: an aggregate's inputs and results --------------------------
# The binder (``plan/aggregate_columns.py``) and the rules name what an aggregate reads and
# computes, so that equal aggregates of two queries are one node whatever the user called
# things; EXPLAIN shows what each stands for (``plan/labels.py``).


def group_key(i: int) -> str:
    """The column of an aggregate's ``i``-th distinct group key."""
    return f"_g{i}"


def aggregate_argument(i: int) -> str:
    """The column of an aggregate's ``i``-th distinct argument."""
    return f"_a{i}"


def aggregate_result(i: int) -> str:
    """The column of an aggregate's ``i``-th distinct call."""
    return f"_x{i}"


def partial_key(i: int) -> str:
    """A key computed below a join with a table, so that the aggregate before the join can
    group by it (``aggregate_before_table_joins``).
    """
    return f"_p{i}"


def partial_value(i: int) -> str:
    """The ``i``-th call's value aggregated before a join with a table."""
    return f"_q{i}"


def partial_count(i: int) -> str:
    """The count beside an average's partial sum, before a join with a table."""
    return f"_c{i}"


def combined_sum(i: int) -> str:
    """An average's partial sums combined after the join."""
    return f"_s{i}"


def combined_count(i: int) -> str:
    """An average's partial counts combined after the join."""
    return f"_n{i}"


def family_key(i: int) -> str:
    """The ``i``-th key column of a family of aggregates over one input (runtime/)."""
    return f"_k{i}"


#: every name above
GENERATED = re.compile(r"_[a-z]\d+")
#: the names of an aggregate's keys and results: what its output projection may read
KEY_OR_RESULT = re.compile(r"_[gx]\d+")
