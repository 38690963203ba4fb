"""Rows refused at the door: why, and the row as it was sent."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RowError:
    """Why row ``index`` of a push was refused (``column`` None: the row as a whole);
    ``what`` is ``delete`` for one of a push's deletes (a keyed stream's).
    """

    index: int
    column: str | None
    reason: str
    raw: str
    what: str = "row"

    def describe(self) -> str:
        """One line: ``row 3, column 't': 'abc' is not a whole number``."""
        where = f"{self.what} {self.index}" + (f", column {self.column!r}" if self.column else "")
        return f"{where}: {self.reason}"
