"""A query given apart from its statement (``Engine.create_query``, ``sparkcq submit
--language apas``): the CREATE QUERY statement that carries it, and its errors moved back
into the text the user gave.
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkcq.errors import Location, QuerySyntaxError, QueryTextError
from sparkcq.language.apas.parser import quote_query, unquote_positions

LANGUAGES = ("sql", "apas")


def query_statement(name: str, text: str, language: str,
                    options: Mapping[str, str]) -> tuple[str, int]:
    """``CREATE QUERY name [WITH (...)] ... AS text`` and where ``text`` starts in it (the
    opening quote of an APAS query's string).
    """
    language = language.lower()
    if language not in LANGUAGES:
        msg = f"unknown query language {language!r}; use one of {', '.join(LANGUAGES)}"
        raise QuerySyntaxError(msg)
    head = f"CREATE QUERY {name}"
    if options:
        pairs = ", ".join(f"{k}={quote_query(str(v))}" for k, v in options.items())
        head += f" WITH ({pairs})"
    if language == "sql":
        head += " AS "
        return head + text, len(head)
    head += " LANGUAGE apas AS "
    return head + quote_query(text), len(head)


def within_query_text(error: QueryTextError, statement: str, start: int,
                      text: str) -> QueryTextError:
    """``error`` (raised on ``statement``) pointing into ``text``, the query that starts
    at ``start`` in it; an error outside the query (the name, an option) stays as it is.
    """
    if error.loc is None or error.text != statement or error.loc.start < start:
        return error
    if statement[start:start + 1] == "'":  # an APAS query, quoted
        positions = unquote_positions(statement, start, len(statement), text)
        first = next((i for i, p in enumerate(positions) if p >= error.loc.start), len(text))
        last = next((i for i, p in enumerate(positions) if p >= error.loc.end), len(text))
    else:
        first, last = error.loc.start - start, error.loc.end - start
    moved = type(error)(error.message, text, Location.of_span(text, first, max(last, first)))
    moved.__cause__ = error.__cause__
    return moved
