"""The per-row steps between a window and the operator that reads its rows (filters and
projections, lowest first) lowered to one SQL text over those rows, for every operator
that reads events through such a chain (sliced aggregates, interval joins).

    steps: Project `k` AS _g0, `v` AS _a0 <- Filter v > 0.5      carried: _t, _d
    (SELECT `k` AS `_g0`, `v` AS `_a0`, `_t`, `_d` FROM (SELECT * FROM {inp} WHERE v > 0.5))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from sparkcq.plan.nodes import Filter, Project
from sparkcq.runtime.frames import q


def chain_sql(source: str, steps: Iterable[Filter | Project], carried: Sequence[str],
              blank: frozenset[str] = frozenset()) -> str:
    """``source`` through ``steps``, each projection keeping the ``carried`` columns
    beside its own; the columns named in ``blank`` are NULL of their type (a family tries
    one query's part of a cycle without the others' expressions).
    """
    src = source
    for step in steps:
        if isinstance(step, Filter):
            src = f"(SELECT * FROM {src} WHERE {step.predicate.sql})"
            continue
        types = {f.name: f.dataType.simpleString() for f in step.schema.fields}
        # a projection may keep no column of its own (count(*) alone, no keys)
        exprs = ", ".join([
            *(f"CAST(NULL AS {types[name]}) AS {q(name)}" if name in blank
              else f"{e.sql} AS {q(name)}" for name, e in step.exprs), *map(q, carried)])
        src = f"(SELECT {exprs} FROM {src})"
    return src
