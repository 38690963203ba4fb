"""Names in scope while a SELECT is bound: its FROM items, each with its alias, plan and
columns, and how a column reference resolves to a plan column (qualified, unqualified,
a path into a struct), with the error a user can act on when it does not.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlglot.expressions as exp

from sparkcq.language.sql.statements import SourceWindow
from sparkcq.plan.nodes import JoinHow, PlanNode

if TYPE_CHECKING:
    from sparkcq.plan.binder import Binder


@dataclass
class Source:
    """A FROM item in scope: its alias, plan, and user column -> plan column names."""

    alias: str
    plan: PlanNode
    columns: dict[str, str]
    window: SourceWindow | None
    period: int | None = None
    # joined by a semi or anti join: it only filters the rows before it, its columns are
    # not in the result
    filters_only: JoinHow | None = None


@dataclass
class Scope:
    sources: list[Source] = field(default_factory=list)

    def resolve(self, col: Any, ctx: Binder) -> str:
        """The plan column a column reference names; a path into a struct is an error here
        (``resolve_path`` takes one).
        """
        column, fields = self.resolve_path(col, ctx)
        if fields:
            msg = f"{col.sql(dialect='spark')} is a field of a struct, not a column"
            raise ctx.error(msg, col)
        return column

    def resolve_path(self, col: Any, ctx: Binder) -> tuple[str, tuple[str, ...]]:
        """The plan column a reference starts from and the struct fields it goes down
        (attribute trees, ``docs/apas.md``): ``s.position.x`` and ``position.x`` are field
        ``x`` of column ``position``, a qualifier first when it names a source in scope.
        """
        parts = [p.name for p in col.parts]
        if len(parts) > 2 or (len(parts) == 2 and not self.is_alias(parts[0])):
            if self.is_alias(parts[0]):
                qualified = exp.column(parts[1], table=parts[0])
                return self.resolve_path(qualified, ctx)[0], tuple(parts[2:])
            if len(parts) <= 4 and any(lookup(s.columns, parts[0]) for s in self.sources):
                head = exp.column(parts[0])
                head.meta.update(col.meta)
                return self.resolve_path(head, ctx)[0], tuple(parts[1:])
        return self._resolve(col, ctx), ()

    def is_alias(self, name: str) -> bool:
        """Whether ``name`` is the alias of a source in scope."""
        return any(s.alias.lower() == name.lower() for s in self.sources)

    def _resolve(self, col: Any, ctx: Binder) -> str:
        name = col.name
        table = col.table
        for src in self.sources:
            if src.filters_only is not None and (
                    src.alias.lower() == table.lower() if table
                    else lookup(src.columns, name) is not None and not any(
                        lookup(s.columns, name) for s in self.sources if s is not src)):
                msg = (f"{src.alias!r} is joined by a LEFT {src.filters_only.name} JOIN: it "
                       f"only decides which rows before it are kept, its column {name!r} is "
                       "not in the result")
                raise ctx.error(msg, col)
        if table:
            for src in self.sources:
                if src.alias.lower() == table.lower():
                    found = lookup(src.columns, name)
                    if found is None:
                        cols = ", ".join(src.columns)
                        msg = f"unknown column {name!r} in {src.alias!r}; columns: {cols}"
                        raise ctx.error(msg, col)
                    return found
            aliases = ", ".join(s.alias for s in self.sources)
            msg = f"unknown stream or alias {table!r}; in this query: {aliases}"
            raise ctx.error(msg, col)
        hits = [(s, lookup(s.columns, name)) for s in self.sources if s.filters_only is None]
        hits = [(s, c) for s, c in hits if c is not None]
        if not hits:
            where = " or ".join(repr(s.alias) for s in self.sources)
            cols = ", ".join(dict.fromkeys(c for s in self.sources for c in s.columns))
            msg = f"unknown column {name!r} in {where}; columns: {cols}"
            raise ctx.error(msg, col)
        if len(hits) > 1:
            which = ", ".join(f"{s.alias}.{name}" for s, _ in hits)
            msg = f"column {name!r} is ambiguous; write one of {which}"
            raise ctx.error(msg, col)
        return hits[0][1]  # type: ignore[return-value]


def scope_period(scope: Scope) -> int | None:
    """The period RSTREAM evaluates a query at: its sources' one slide or chunk length."""
    periods = {s.period for s in scope.sources if s.period}
    return periods.pop() if len(periods) == 1 else None


def source_column(position: int, column: str) -> str:
    """The plan's name of ``column`` of the FROM item at ``position`` (0 the first) in a
    query of several.
    """
    return f"_{position}__{column}"


def lookup(columns: dict[str, str], name: str) -> str | None:
    if name in columns:
        return columns[name]
    for user, internal in columns.items():
        if user.lower() == name.lower():
            return internal
    return None


def conjuncts_of(cond: exp.Expression) -> list[exp.Expression]:
    """``a AND b AND c`` as [a, b, c] (parentheses around a conjunction are looked through)."""
    while isinstance(cond, exp.Paren):
        cond = cond.this
    if isinstance(cond, exp.And):
        return [*conjuncts_of(cond.args["this"]), *conjuncts_of(cond.args["expression"])]
    return [cond]


def output_name(e: exp.Expression) -> str:
    """The name a SELECT-list expression gets: its alias, its column name, or its text."""
    if isinstance(e, exp.Alias):
        return e.alias
    if isinstance(e, exp.Column):
        return e.name
    return e.sql(dialect="spark")


def canonical_text(node: exp.Expression) -> str:
    """An expression's text for comparing two spellings of it (a GROUP BY key and a
    SELECT-list item): Spark SQL, lower case.
    """
    return node.sql(dialect="spark").lower()
