"""The binder's pass over UNION, INTERSECT and EXCEPT: each input bound on its own,
the columns matched by position and typed as one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlglot.expressions as exp

from sparkcq.plan.counting import copies, counts_per_input, distinct, quote
from sparkcq.plan.nodes import EdgeKind, PlanNode, UnboundedSpec, Union, Window

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder


def set_inputs(binder: Binder, node: exp.SetOperation, what: str
               ) -> tuple[PlanNode, PlanNode, int | None]:
    """Both inputs of a set operation, bound, their columns checked and named as the
    left's; raw streams made relations (``[UNBOUNDED]``) unless ``what`` is UNION ALL.
    """
    left, lp = binder.bind(node.left)
    right, rp = binder.bind(node.right)
    lf, rf = left.schema.fields, right.schema.fields
    if len(lf) != len(rf):
        msg = f"{what} inputs have {len(lf)} and {len(rf)} columns; they must match"
        raise binder.error(msg, node)
    for a, b in zip(lf, rf, strict=True):
        if a.dataType != b.dataType:
            msg = (
                f"{what} column {a.name!r} is {a.dataType.simpleString()} on the left "
                f"but {b.dataType.simpleString()} on the right; cast one side"
            )
            raise binder.error(msg, node)
    kinds = {left.kind, right.kind}
    if what != "UNION ALL":
        left, right = (Window(p, UnboundedSpec()) if p.kind is EdgeKind.STREAM else p
                       for p in (left, right))
    elif EdgeKind.STREAM in kinds and len(kinds) > 1:
        msg = "UNION ALL of a raw stream and a windowed relation; add a window to both sides"
        raise binder.error(msg, node)
    if [f.name for f in rf] != [f.name for f in lf]:
        right = binder.project(
            right, [(a.name, quote(b.name)) for a, b in zip(lf, rf, strict=True)], node
        )
    periods = {p for p in (lp, rp) if p}
    return left, right, (periods.pop() if len(periods) == 1 else None)


def bind_union(binder: Binder, node: exp.Union) -> tuple[PlanNode, int | None]:
    left, right, period = set_inputs(binder, node, "UNION ALL")
    inputs: list[PlanNode] = []
    for side in (left, right):
        inputs.extend(side.inputs if isinstance(side, Union) else (side,))
    return Union(tuple(inputs)), period


def bind_set_operation(binder: Binder, node: exp.SetOperation) -> tuple[PlanNode, int | None]:
    """UNION, INTERSECT and EXCEPT (ALL or DISTINCT) on every snapshot, from how many
    copies of each row each input holds (``plan/counting.py``).
    """
    every = not node.args.get("distinct")
    what = f"{node.key.upper()}{' ALL' if every else ''}"
    left, right, period = set_inputs(binder, node, what)
    if isinstance(node, exp.Union):
        return distinct(Union((left, right))), period
    counted = counts_per_input((left, right), ("_left", "_right"))
    if isinstance(node, exp.Intersect):
        how_many = "least(`_left`, `_right`)" if every else \
            "CAST(`_left` > 0 AND `_right` > 0 AS BIGINT)"
    else:
        how_many = "greatest(`_left` - `_right`, CAST(0 AS BIGINT))" if every else \
            "CAST(`_left` > 0 AND `_right` = 0 AS BIGINT)"
    return copies(counted, how_many), period
