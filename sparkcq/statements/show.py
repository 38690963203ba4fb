"""``SHOW STREAMS | TABLES | QUERIES | FUNCTIONS | AGGREGATES``: the catalog as small tables
(``inspection.py`` builds them).
"""

from __future__ import annotations

import pandas as pd

from sparkcq.language.sql.statements import Show
from sparkcq.statements.context import StatementContext


def show_statement(stmt: Show, text: str, ctx: StatementContext) -> pd.DataFrame:
    """The SHOW's table."""
    return ctx.view().show(stmt.what)
