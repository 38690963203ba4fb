"""Scripts are all or nothing: every statement of a script runs, or none takes effect.

The whole script is parsed first, so a syntax error anywhere runs nothing. Then the
statements run in order; when one fails, what the statements before it (and the failing
one, part way) created is undone in reverse order: created queries, streams, tables,
aggregates and libraries are dropped, a table a CREATE TABLE replaced comes back. A script of one
statement raises that statement's own error; a longer one raises a ScriptError that names
the failing statement's line and says nothing was applied.

A DROP cannot be undone (a dropped query's state is gone), so a script holding a DROP holds
only DROPs, and they are all checked before the first runs: each names something that
exists, and whatever uses it is dropped earlier in the script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkcq.catalog import Catalog, TableInfo
from sparkcq.errors import AnalysisError, Location, ScriptError, SparkcqError
from sparkcq.language.sql.statements import Drop, ObjectKind, Statement
from sparkcq.statements.context import StatementContext
from sparkcq.statements.drop import check_drop, drop

Located = list[tuple[Statement, Location]]


@dataclass(frozen=True)
class CatalogNames:
    """The names in the catalog before a statement (tables with their entry, which CREATE
    TABLE may replace): what that statement created is what is new after it.
    """

    streams: frozenset[str]
    tables: dict[str, TableInfo]
    queries: frozenset[str]
    aggregates: frozenset[str]
    libraries: frozenset[str]
    table_functions: frozenset[str]

    @classmethod
    def of(cls, catalog: Catalog) -> CatalogNames:
        """The names ``catalog`` holds now."""
        return cls(frozenset(catalog.streams), dict(catalog.tables), frozenset(catalog.queries),
                   frozenset(catalog.aggregates), frozenset(catalog.libraries),
                   frozenset(catalog.table_functions))


@dataclass(frozen=True)
class Created:
    """What one statement of a script created, and the tables it replaced: how to undo it."""

    queries: tuple[str, ...]
    streams: tuple[str, ...]
    tables: tuple[str, ...]
    aggregates: tuple[str, ...]
    libraries: tuple[str, ...]
    table_functions: tuple[str, ...]
    replaced_tables: dict[str, TableInfo]

    @classmethod
    def since(cls, before: CatalogNames, catalog: Catalog) -> Created:
        """What is in ``catalog`` now and was not ``before``."""
        return cls(
            tuple(q.name for k, q in catalog.queries.items() if k not in before.queries),
            tuple(s.name for k, s in catalog.streams.items() if k not in before.streams),
            tuple(t.name for k, t in catalog.tables.items() if k not in before.tables),
            tuple(a for a in catalog.aggregates if a not in before.aggregates),
            tuple(lib for lib in catalog.libraries if lib not in before.libraries),
            tuple(f for f in catalog.table_functions if f not in before.table_functions),
            {k: t for k, t in before.tables.items()
             if k in catalog.tables and catalog.tables[k] is not t})

    def drops(self) -> list[tuple[ObjectKind, str]]:
        """The DROPs that undo it: queries first, as they may read the streams."""
        return ([(ObjectKind.QUERY, n) for n in self.queries]
                + [(ObjectKind.STREAM, n) for n in self.streams]
                + [(ObjectKind.TABLE, n) for n in self.tables]
                + [(ObjectKind.AGGREGATE, n) for n in self.aggregates]
                + [(ObjectKind.LIBRARY, n) for n in self.libraries]
                + [(ObjectKind.FUNCTION, n) for n in self.table_functions])


def run_script(ctx: StatementContext, sql: str, located: Located,
               run: Callable[[Statement, str, StatementContext], Any]) -> Any:
    """Run the parsed statements of script ``sql`` all or nothing (see the module), each
    through ``run``; the last statement's result.
    """
    drops = [stmt for stmt, _ in located if isinstance(stmt, Drop)]
    if drops and len(drops) < len(located):
        first = next(loc for stmt, loc in located if isinstance(stmt, Drop))
        msg = ("a script with DROP must hold only DROP statements: a DROP cannot be "
               "undone if a later statement fails; run the DROPs as a script of their own")
        raise AnalysisError(msg, sql, first)
    if drops:
        check_drops(ctx, sql, located)
    anonymous = ctx.anonymous  # numbers of unnamed queries, given back when undone
    created: list[Created] = []
    result: Any = None
    for i, (stmt, loc) in enumerate(located):
        before = CatalogNames.of(ctx.catalog)
        try:
            result = run(stmt, sql, ctx)
        except Exception as e:
            created.append(Created.since(before, ctx.catalog))
            problems = undo(ctx, created)
            if not problems:
                ctx.anonymous = anonymous
            applied = [statement_head(sql, at) for done, at in located[:i]
                       if isinstance(done, Drop)]
            if len(located) == 1 and not problems:
                raise
            failure = script_failure(sql, located, i, e, applied, problems)
            if not isinstance(e, SparkcqError):
                e.add_note(failure)  # a bug, not a mistake in the script: keep its class
                raise
            raise ScriptError(failure, e, loc.line) from e
        created.append(Created.since(before, ctx.catalog))
    return result


def check_drops(ctx: StatementContext, sql: str, located: Located) -> None:
    """Check a script of DROPs as a whole before any of them runs."""
    dropped: set[tuple[ObjectKind, str]] = set()
    for i, (stmt, loc) in enumerate(located):
        assert isinstance(stmt, Drop)
        try:
            check_drop(ctx, stmt.kind, stmt.name, frozenset(dropped))
        except SparkcqError as e:
            if len(located) == 1:
                raise
            failure = script_failure(sql, located, i, e, [], [])
            raise ScriptError(failure, e, loc.line) from e
        dropped.add((stmt.kind, stmt.name.lower()))


def undo(ctx: StatementContext, created: list[Created]) -> list[str]:
    """Undo what statements created, last first; what could not be undone, as text."""
    problems = []
    for step in reversed(created):
        for kind, name in step.drops():
            try:
                drop(ctx, kind, name)
            except Exception as e:  # noqa: BLE001 - reported with the script's error
                problems.append(f"DROP {kind} {name} failed: {e}")
        for table in step.replaced_tables.values():
            ctx.tables.put_back(table)
        if step.replaced_tables:
            ctx.queries.compile()  # a replacement not yet switched to is called off
    return problems


def statement_head(sql: str, loc: Location) -> str:
    """The start of a statement's text, on one line, to name it in a message."""
    text = " ".join(sql[loc.start:loc.end].split())
    return text if len(text) <= 60 else text[:57] + "..."


def script_failure(sql: str, located: Sequence[tuple[Statement, Location]], index: int,
                   error: BaseException, applied: list[str], problems: list[str]) -> str:
    """Why a script failed: which statement, what became of the others, the error itself."""
    loc = located[index][1]
    where = f"statement {index + 1} of {len(located)} (line {loc.line}: {statement_head(sql, loc)})"
    if applied or problems:
        kept = "; ".join([*(f"{a} took effect and cannot be undone" for a in applied),
                          *problems])
        return f"{where} failed and the script was applied only in part ({kept}): {error}"
    return f"{where} failed, so the script was not applied (nothing of it took effect): {error}"
