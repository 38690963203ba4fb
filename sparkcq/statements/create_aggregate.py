"""``CREATE AGGREGATE name(arg TYPE, ...) RETURNS TYPE USING 'module:Class'``: a user
aggregate, accepted while queries run; queries submitted afterwards may call
it. ``USING`` loads code only from modules the policy allows.
"""

from __future__ import annotations

from pyspark.sql.types import DataType

from sparkcq.aggregates.user import define_aggregate, load_aggregate_class
from sparkcq.catalog import ensure_identifier
from sparkcq.errors import AnalysisError, CatalogError
from sparkcq.language.sql.statements import CreateAggregate
from sparkcq.runtime.functions import ensure_data_type, ship_module_by_value
from sparkcq.statements.context import StatementContext


def create_aggregate(stmt: CreateAggregate, text: str, ctx: StatementContext) -> None:
    """Load the aggregate's class and add it to the catalog."""
    params = []
    for p in stmt.params:
        try:
            params.append((p.name, ensure_data_type(p.type_sql)))
        except CatalogError:
            msg = f"unknown type {p.type_sql!r} for argument {p.name!r}"
            raise AnalysisError(msg, text, p.loc) from None
    try:
        cls = load_aggregate_class(stmt.using, stmt.name, ctx.policy.allow_udf_modules)
        add_aggregate(ctx, stmt.name, cls, params, ensure_data_type(stmt.returns), stmt.using)
    except CatalogError as e:
        raise AnalysisError(str(e), text, stmt.loc) from None


def add_aggregate(ctx: StatementContext, name: str, cls: type,
                  params: list[tuple[str, DataType]], return_type: DataType,
                  using: str | None = None) -> None:
    """Make class ``cls`` callable from queries as ``name(...)`` (also from Python:
    ``Engine.create_aggregate``); CatalogError when the name is taken.
    """
    ensure_identifier(name, "aggregate")
    key = name.lower()
    if key in ctx.catalog.aggregates:
        msg = f"an aggregate named {name!r} already exists; DROP AGGREGATE {name} first"
        raise CatalogError(msg)
    if key in ctx.catalog.functions:
        msg = f"a function named {name!r} already exists; pick another name"
        raise CatalogError(msg)
    uda = define_aggregate(name, cls, params, return_type, using)
    ship_module_by_value(cls)
    ctx.catalog.aggregates[key] = uda
