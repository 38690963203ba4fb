"""Exceptions of sparkcq: one root, one subclass per stage, messages a user can act on."""

from __future__ import annotations

from dataclasses import dataclass


class SparkcqError(Exception):
    """Root of every error sparkcq raises on purpose."""


@dataclass(frozen=True)
class Location:
    """A place in query text: 1-based line and column plus the offending fragment."""

    line: int
    col: int
    start: int
    end: int

    @classmethod
    def of_span(cls, text: str, start: int, end: int) -> Location:
        """Build a location from 0-based character offsets [start, end) into ``text``."""
        start = max(0, min(start, len(text)))
        end = max(start, min(end, len(text)))
        line = text.count("\n", 0, start) + 1
        col = start - (text.rfind("\n", 0, start) + 1) + 1
        return cls(line, col, start, end)


def highlight(text: str, loc: Location) -> str:
    """Return the line of ``text`` holding ``loc`` with the fragment underlined by carets."""
    lines = text.splitlines() or [""]
    src = lines[min(loc.line, len(lines)) - 1]
    width = max(1, min(loc.end, loc.start + len(src)) - loc.start)
    return f"  {src}\n  {' ' * (loc.col - 1)}{'^' * width}"


class QueryTextError(SparkcqError, ValueError):
    """An error in query text; carries the place so the message points at it."""

    def __init__(self, message: str, text: str | None = None, loc: Location | None = None):
        self.message = message
        self.text = text
        self.loc = loc
        full = message
        if loc is not None:
            full = f"{message} (line {loc.line}, col {loc.col})"
            if text is not None:
                full = f"{full}\n{highlight(text, loc)}"
        super().__init__(full)


class QuerySyntaxError(QueryTextError):
    """The statement does not parse."""


class AnalysisError(QueryTextError):
    """The statement parses but names unknown things, mixes types or misuses aggregates."""


class PlanError(SparkcqError, ValueError):
    """A query cannot be turned into an executable plan."""


class CatalogError(SparkcqError, KeyError):
    """A stream, table or query is unknown, or its name is taken."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownNameError(CatalogError):
    """No stream, table, query or aggregate has this name (the server answers 404)."""


class ExecutionError(SparkcqError, RuntimeError):
    """A running query failed; the message names the query and the operator."""


class SinkError(ExecutionError):
    """A sink could not commit a cycle's records; it wrote none of them (rolled back), and
    the engine rolls the cycle back too, keeping its input for the next attempt.
    """


class ScriptError(SparkcqError):
    """A statement of a script failed, so the script was not applied (``Engine.execute``).

    ``cause`` is the failing statement's own error, whose class says what kind of mistake it
    is; ``line`` is where that statement starts in the script.
    """

    def __init__(self, message: str, cause: BaseException, line: int):
        super().__init__(message)
        self.cause = cause
        self.line = line


class SparkDiedError(ExecutionError):
    """Spark's JVM is gone: no query can run until the service is restarted."""


class SourceError(SparkcqError, ValueError):
    """Input could not be accepted by a source (wrong shape, unknown stream)."""


class BackpressureError(SourceError):
    """A stream's queue of pushed rows is full: the push was not taken, send it again later."""


class FeedError(SourceError):
    """A feed message was refused: unreadable, a missing field, an unknown stream, over a
    limit, or not allowed in the stream's state (``docs/feed.md``).
    """
