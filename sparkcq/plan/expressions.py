"""Scalar expressions of plan nodes: a sqlglot tree and its type, equal to another expression
when it means the same thing.

Plan nodes compare by value, and the global plan shares equal nodes. With expressions kept
as text, a query that writes ``b.k = a.k`` where another wrote ``a.k = b.k``, or its
conjuncts in another order, built different nodes and was computed twice. An ``Expr``
compares by a canonical key instead, built from its tree:

- ``AND`` and ``OR`` chains are flattened and their operands sorted;
- the two sides of a commutative operator (``=``, ``<=>``, ``<>``, ``+``, ``*``, bitwise
  ``&``, ``|``, ``^``) are sorted; ``a > b`` is ``b < a`` and ``a >= b`` is ``b <= a``;
- parentheses are structure, not text; identifiers and function names ignore case and
  quoting; whole numbers ignore leading zeros.

>>> Expr.parse("`k` = `j` AND `v` > 1") == Expr.parse("1 < v and j = k")
True

The key is a structural rendering of the tree (operator names and their operands), never
SQL text, so that two trees that differ only where SQL would need parentheses never meet.
What Spark runs is the text of the first query that built the node (``Expr.sql``): an equal
expression means the same rows, whichever spelling computes them.

Column references are the plan's column names (the binder resolves the user's names and
aliases to them), so the key compares what an expression reads, not how the user named it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlglot
from pyspark.sql.types import DataType, NullType
from sqlglot import exp
from sqlglot.errors import ParseError

from sparkcq.errors import PlanError

#: operators whose operands may change places
_COMMUTATIVE: tuple[type[exp.Expr], ...] = (
    exp.EQ, exp.NEQ, exp.NullSafeEQ, exp.Add, exp.Mul,
    exp.BitwiseAnd, exp.BitwiseOr, exp.BitwiseXor,
)
#: ``a > b`` is ``b < a``: comparisons keep only one direction
_FLIPPED: dict[type[exp.Expr], type[exp.Binary]] = {exp.GT: exp.LT, exp.GTE: exp.LTE}


@dataclass(frozen=True)
class Expr:
    """A scalar expression over a plan node's input columns, with its Spark type.

    Equal and hashed by ``key`` alone: its meaning, not its spelling (module docstring).
    ``sql`` is the Spark SQL that runs; ``shown`` is the user's own text, for EXPLAIN.
    """

    key: str
    # not compared, and not in the repr either: an operator's state is named by its node's
    # repr (runtime/state.py), which must not depend on the spelling
    sql: str = field(compare=False, repr=False)
    tree: exp.Expr = field(compare=False, repr=False)
    dtype: DataType = field(compare=False, repr=False, default_factory=NullType)
    shown: str = field(compare=False, repr=False, default="")

    @classmethod
    def parse(cls, sql: str, dtype: DataType | None = None,
              shown: str | None = None) -> Expr:
        """The expression of Spark SQL text over plan column names; Spark runs the text as
        given.
        """
        tree = parse_expression(sql)
        return cls(canonical_key(tree), sql, tree,
                   dtype if dtype is not None else NullType(),
                   shown if shown is not None else sql)

    def __str__(self) -> str:
        return self.shown


def parse_expression(sql: str) -> exp.Expr:
    """The sqlglot tree of a Spark SQL expression; ``PlanError`` if it is none."""
    try:
        tree = sqlglot.parse_one(sql, read="spark")
    except ParseError as e:
        msg = f"not a Spark SQL expression: {sql!r} ({e.errors[0]['description']})"
        raise PlanError(msg) from None
    assert isinstance(tree, exp.Expr)
    return tree


def canonical_key(tree: exp.Expr) -> str:
    """The key two expressions share exactly when they are the same up to the rewritings of
    the module docstring.
    """
    return _render(_canonical(tree.copy()))


def conjuncts(tree: exp.Expr) -> list[exp.Expr]:
    """The operands of a chain of ``AND`` (through parentheses), or ``[tree]``."""
    return _flatten(tree, exp.And)


def _flatten(tree: exp.Expr, kind: type[exp.Connector]) -> list[exp.Expr]:
    node = tree
    while isinstance(node, exp.Paren):
        node = node.this
    if isinstance(node, kind):
        return [*_flatten(node.this, kind), *_flatten(node.expression, kind)]
    return [tree]


def _canonical(node: exp.Expr) -> exp.Expr:
    """``node`` rewritten bottom-up into its canonical form (it may be changed in place)."""
    for name, value in list(node.args.items()):
        if isinstance(value, exp.Expr):
            node.set(name, _canonical(value))
        elif isinstance(value, list):
            node.set(name, [_canonical(v) if isinstance(v, exp.Expr) else v
                            for v in value])
    if isinstance(node, exp.Paren):
        return node.this
    if isinstance(node, exp.And | exp.Or):
        kind = type(node)
        first, *rest = sorted(_flatten(node, kind), key=_render)
        for part in rest:
            first = kind(this=first, expression=part)
        return first
    flipped = _FLIPPED.get(type(node))
    if flipped is not None:
        return flipped(this=node.expression, expression=node.this)
    if isinstance(node, _COMMUTATIVE):
        a, b = node.this, node.expression
        if _render(b) < _render(a):
            return type(node)(this=b, expression=a)
    return node


def _render(node: object) -> str:
    """A structural rendering: the operator's name and its arguments, nested."""
    if not isinstance(node, exp.Expr):
        return repr(node)
    if isinstance(node, exp.Identifier):
        return f"(id {node.name.lower()})"
    if isinstance(node, exp.Literal):
        text = node.name
        if not node.is_string and text.isdigit():
            text = str(int(text))
        return f"(lit {'s' if node.is_string else 'n'} {text!r})"
    if isinstance(node, exp.Anonymous):
        args = " ".join(_render(a) for a in node.expressions)
        return f"(call {node.name.lower()} {args})"
    parts = [type(node).__name__]
    for name in sorted(node.args):
        value = node.args[name]
        if value is None or value is False or value == []:
            continue
        if isinstance(value, list):
            parts.append(f"{name}=[{' '.join(_render(v) for v in value)}]")
        else:
            parts.append(f"{name}={_render(value)}")
    return f"({' '.join(parts)})"
