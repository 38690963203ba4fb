"""``DROP QUERY | STREAM | TABLE | AGGREGATE | FUNCTION | LIBRARY name``: refused while
something else uses it.

Dropping a query removes exactly the operators no other query uses and frees their state;
dropping a stream closes its source (a feed stream's spool is deleted).
"""

from __future__ import annotations

from sparkcq.errors import CatalogError, UnknownNameError
from sparkcq.io.feed_source import FeedSource
from sparkcq.language.sql.statements import Drop, ObjectKind
from sparkcq.plan.nodes import walk
from sparkcq.statements.context import StatementContext
from sparkcq.statements.create_library import library_users, remove_library
from sparkcq.statements.remove import release_removed


def drop_statement(stmt: Drop, text: str, ctx: StatementContext) -> None:
    """``DROP kind name``."""
    drop(ctx, stmt.kind, stmt.name)


def drop(ctx: StatementContext, kind: ObjectKind, name: str) -> None:
    """Drop a query, stream, table, aggregate or library; CatalogError when it is in use."""
    check_drop(ctx, kind, name)
    catalog = ctx.catalog
    if kind is ObjectKind.AGGREGATE:
        del catalog.aggregates[name.lower()]
        return
    if kind is ObjectKind.FUNCTION:
        del catalog.table_functions[name.lower()]
        return
    if kind is ObjectKind.LIBRARY:
        remove_library(ctx, name)
        return
    if kind is ObjectKind.QUERY:
        info = catalog.query(name)
        ctx.queries.drop(info.name)
        ctx.sinks.forget(info.name)
        del catalog.queries[info.name.lower()]
        release_removed(ctx)  # a stream its feed removed goes with its last reader
        ctx.queries.rt.end_cycle()  # between cycles: free the dropped state now
        return
    key = name.lower()
    space = catalog.streams if kind is ObjectKind.STREAM else catalog.tables
    del space[key]
    if kind is ObjectKind.STREAM and key in ctx.sources:
        ctx.queries.scans.remove(key)
        source = ctx.sources.pop(key)
        source.close()
        if isinstance(source, FeedSource):
            source.delete()
        ctx.queries.compile()


def check_drop(ctx: StatementContext, kind: ObjectKind, name: str,
               dropped: frozenset[tuple[ObjectKind, str]] = frozenset()) -> None:
    """Raise CatalogError unless ``name`` can be dropped: it exists and nothing uses it.

    ``dropped`` holds ``(kind, lower-case name)`` of what earlier DROPs of the same script
    remove: those are gone, and they no longer count as users.
    """
    catalog = ctx.catalog
    if (kind, name.lower()) in dropped:
        msg = f"{kind.lower()} {name!r} is already dropped by an earlier statement"
        raise CatalogError(msg)
    if kind is ObjectKind.AGGREGATE:
        if name.lower() not in catalog.aggregates:
            known = ", ".join(sorted(catalog.aggregates)) or "none"
            msg = f"unknown aggregate {name!r}; aggregates: {known}"
            raise UnknownNameError(msg)
        users = ctx.view().aggregate_users(name)
    elif kind is ObjectKind.FUNCTION:
        if name.lower() not in catalog.table_functions:
            known = ", ".join(sorted(catalog.table_functions)) or "none"
            msg = f"unknown table function {name!r}; table functions: {known}"
            raise UnknownNameError(msg)
        users = ctx.view().table_function_users(name)
    elif kind is ObjectKind.LIBRARY:
        if name.lower() not in catalog.libraries:
            known = ", ".join(sorted(catalog.libraries)) or "none"
            msg = f"unknown library {name!r}; libraries: {known}"
            raise UnknownNameError(msg)
        users = library_users(ctx, name)
    elif kind is ObjectKind.QUERY:
        catalog.query(name)
        users = []
    else:
        space = catalog.streams if kind is ObjectKind.STREAM else catalog.tables
        target = space.get(name.lower())
        if target is None:
            msg = f"unknown {kind.lower()} {name!r}"
            raise UnknownNameError(msg)
        users = [r.name for r in ctx.queries.reading(lambda n: n == target.plan)]
        users += [s.name for s in catalog.streams.values()
                  if s.derived and s is not target and target.plan in walk(s.plan)]
    users = [u for u in users if (ObjectKind.QUERY, u.lower()) not in dropped
             and (ObjectKind.STREAM, u.lower()) not in dropped]
    if users:
        msg = f"{kind.lower()} {name!r} is used by {', '.join(users)}; drop them first"
        raise CatalogError(msg)
