"""``REFRESH TABLE name``: read a table again from where it came from, as its next version
(running queries switch to it in the next cycle; ``tables.py``).
"""

from __future__ import annotations

from sparkcq.language.sql.statements import Refresh
from sparkcq.statements.context import StatementContext


def refresh(stmt: Refresh, text: str, ctx: StatementContext) -> None:
    """Refresh the table."""
    ctx.tables.refresh(stmt.name, ctx.cycle())
