"""Notes a query's log gets when it is created: what a user coming from another system
might read differently in what they wrote.
"""

from __future__ import annotations

from sparkcq.model.time import TimeKind, show_micros
from sparkcq.plan.nodes import PlanNode, RangeSpec, StreamScan, Window, walk


def window_edge_notes(plan: PlanNode) -> list[str]:
    """A note per hopping ``[RANGE w SLIDE s]`` window: its windows are ``(t - w, t]``, so
    an event on an edge counts in the window ending there, where Flink's and Spark's
    ``[start, end)`` (and sparkcq's chunk windows) count it in the window it starts.
    """
    notes = []
    for node in walk(plan):
        if not (isinstance(node, Window) and isinstance(node.spec, RangeSpec)
                and node.spec.slide):
            continue
        spec = node.spec
        assert spec.slide is not None
        time = node.child.time_col if isinstance(node.child, StreamScan) else "<time>"

        def shown(n: int, kind: TimeKind = node.child.time_kind) -> str:
            return show_micros(n) if kind is TimeKind.TIMESTAMP else str(n)

        notes.append(
            f"note: [RANGE {shown(spec.size)} SLIDE {shown(spec.slide)}] evaluates windows "
            f"(t - {shown(spec.size)}, t] at each multiple t of the slide: an event at t "
            "counts in the window ending at t. Flink's and Spark's windows are [start, end): "
            f"for those, write [CUT ON {time} BY {shown(spec.slide)}"
            + (f" WINDOW {spec.size // spec.slide} CHUNKS" if spec.size != spec.slide
               and spec.size % spec.slide == 0 else "")
            + "] or their own forms (docs/semantics.md, \"Window edges\")")
    return notes
