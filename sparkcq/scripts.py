"""Scripts are all or nothing: what each statement of a script created (so that a failure
undoes it), and how a failed statement is named in the error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sparkcq.catalog import Catalog, TableInfo
from sparkcq.errors import Location
from sparkcq.language.sql.statements import Statement


@dataclass(frozen=True)
class CatalogNames:
    """The names in the catalog before a statement (tables with their entry, which CREATE
    TABLE may replace): what that statement created is what is new after it.
    """

    streams: frozenset[str]
    tables: dict[str, TableInfo]
    queries: frozenset[str]
    aggregates: frozenset[str]

    @classmethod
    def of(cls, catalog: Catalog) -> CatalogNames:
        return cls(frozenset(catalog.streams), dict(catalog.tables), frozenset(catalog.queries),
                   frozenset(catalog.aggregates))


@dataclass(frozen=True)
class Created:
    """What one statement of a script created, and the tables it replaced: how to undo it."""

    queries: tuple[str, ...]
    streams: tuple[str, ...]
    tables: tuple[str, ...]
    aggregates: tuple[str, ...]
    replaced_tables: dict[str, TableInfo]

    @classmethod
    def since(cls, before: CatalogNames, catalog: Catalog) -> Created:
        return cls(
            tuple(q.name for k, q in catalog.queries.items() if k not in before.queries),
            tuple(s.name for k, s in catalog.streams.items() if k not in before.streams),
            tuple(t.name for k, t in catalog.tables.items() if k not in before.tables),
            tuple(a for a in catalog.aggregates if a not in before.aggregates),
            {k: t for k, t in before.tables.items()
             if k in catalog.tables and catalog.tables[k] is not t})

    def drops(self) -> list[tuple[str, str]]:
        """The DROPs that undo it: queries first, as they may read the streams."""
        return ([("QUERY", n) for n in self.queries] + [("STREAM", n) for n in self.streams]
                + [("TABLE", n) for n in self.tables]
                + [("AGGREGATE", n) for n in self.aggregates])


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
