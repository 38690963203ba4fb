"""Which user aggregate a function call in query text names, and its arguments.

sqlglot parses many function names into typed nodes (``median(x)`` is ``exp.Median``,
``percentile(x, p)`` is ``exp.Quantile``) that keep neither the name as written nor its
position. A user aggregate may carry such a name (it shadows Spark's function of that
name), so a typed node is matched by the node class each aggregate's name parses to.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

import sqlglot
import sqlglot.expressions as exp

from sparkcq.aggregates.user import UserAggregate


@lru_cache(maxsize=1024)
def parsed_class(name: str) -> type:
    """The sqlglot node class a call of function ``name`` parses to in Spark SQL."""
    try:
        node = sqlglot.parse_one(f"SELECT {name}(x)", read="spark").expressions[0]
    except sqlglot.errors.ParseError:
        return exp.Anonymous
    return type(node)


def called_aggregate(node: exp.Expression, aggregates: dict[str, UserAggregate],
                     text: str) -> UserAggregate | None:
    """The user aggregate ``node`` calls, if any (``aggregates`` by lower-case name).

    Two aggregates whose names parse to one node class (``percentile``, ``quantile``)
    are told apart by which name the query ``text`` calls.
    """
    if not aggregates or not isinstance(node, exp.Func):
        return None
    if isinstance(node, exp.Anonymous):
        return aggregates.get(node.name.lower())
    hits = [a for n, a in aggregates.items() if parsed_class(n) is type(node)]
    if len(hits) > 1:
        hits = [a for a in hits if re.search(rf"\b{re.escape(a.name)}\s*\(", text, re.I)]
    return hits[0] if len(hits) == 1 else None


def call_args(node: exp.Func) -> list[exp.Expression]:
    """A call's arguments in the order written."""
    if isinstance(node, exp.Anonymous):
        return list(node.expressions)
    out: list[exp.Expression] = []
    for key in type(node).arg_types:
        value: Any = node.args.get(key)
        if isinstance(value, list):
            out.extend(value)
        elif isinstance(value, exp.Expression):
            out.append(value)
    return out
