"""The columns the binder names for one aggregate: its group keys, its arguments and its
calls, each distinct one once.

``SELECT k, sum(v) AS s, avg(v) AS a, count(*) AS n FROM ... GROUP BY k`` binds to a
projection computing ``k AS _g0, v AS _a0``, an aggregate of ``sum(_a0) AS _x0,
avg(_a0) AS _x1, count(*) AS _x2 BY _g0`` and a projection naming the results: two calls
of one argument read one column, and a call written twice is computed once. Equal
aggregates of two queries are then equal nodes, whatever the user called things; EXPLAIN
shows what the names stand for (``plan/labels.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sparkcq.aggregates.user import UserAggregate
from sparkcq.model.columns import aggregate_argument, aggregate_result, group_key
from sparkcq.plan.nodes import AggCall


@dataclass
class AggregateColumns:
    """One aggregate's named keys, arguments and calls, collected as the binder meets them."""

    # what the projection below the aggregate computes: (column, SQL), keys first
    below: list[tuple[str, str]] = field(default_factory=list)
    keys: dict[str, str] = field(default_factory=dict)  # a key's SQL -> its column
    arguments: dict[str, str] = field(default_factory=dict)  # an argument's SQL -> its column
    calls: dict[str, AggCall] = field(default_factory=dict)  # what makes a call distinct

    def key(self, sql: str) -> str:
        """The column of the group key ``sql``, named the first time."""
        if sql not in self.keys:
            self.keys[sql] = group_key(len(self.keys))
            self.below.append((self.keys[sql], sql))
        return self.keys[sql]

    def argument(self, sql: str) -> str:
        """The column of the argument ``sql``, named the first time."""
        if sql not in self.arguments:
            self.arguments[sql] = aggregate_argument(len(self.arguments))
            self.below.append((self.arguments[sql], sql))
        return self.arguments[sql]

    def call(self, func: str, arg: str | None, distinct: bool = False,
             uda: UserAggregate | None = None, same_as: str | None = None) -> AggCall:
        """The call of ``func`` over the argument column ``arg``, named the first time;
        ``same_as`` what makes two calls one when not function, DISTINCT and argument
        (a user aggregate's calls: its name).
        """
        key = same_as or f"{func}|{distinct}|{arg}"
        if key not in self.calls:
            self.calls[key] = AggCall(func, arg, distinct, aggregate_result(len(self.calls)),
                                      uda)
        return self.calls[key]
