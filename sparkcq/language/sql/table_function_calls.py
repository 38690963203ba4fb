"""User table functions in FROM: ``f(TABLE s [window] PARTITION BY k, arg, ...)``.

The form is Spark's and Flink's for a table argument (``TABLE s`` or ``TABLE(s)``, then
``PARTITION BY k`` or ``PARTITION BY (k, j)``); the arguments after it are literals passed
to the function's constructor: numbers, strings, TRUE, FALSE, NULL and lengths of event
time (``INTERVAL '5' SECONDS``, ``5 SECONDS``, or a number on a numeric stream). A window
clause after the stream's name cuts what the function reads::

    SELECT * FROM dedup(TABLE calls [CUT ON t BY 5 SECONDS] PARTITION BY caller, 'start', 1, 60)

Like window clauses, the call is cut out of the text before sqlglot reads it: the stream's
name takes its place, so the binder finds the call by where that name ends.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from sqlglot.tokens import Token, TokenType

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.language.sql.statements import TableFunctionCall
from sparkcq.language.sql.window_functions import (
    duration_argument,
    matching_paren,
    split_arguments,
)
from sparkcq.model.time import DURATION_UNITS, Duration
from sparkcq.model.windows import WindowSpec

#: reads a window clause's tokens (between the brackets) into its spec
WindowReader = Callable[[list[Token], Token], WindowSpec]

_FORM = "f(TABLE s [window] PARTITION BY k, arguments...)"


@dataclass(frozen=True)
class FoundCall:
    """A table function call found at a FROM item: what the text becomes, and its parts."""

    call: TableFunctionCall
    stream: Token  # the stream's name
    window: tuple[WindowSpec, Location] | None
    last: int  # index of the call's closing parenthesis


def is_user_table_function(tokens: list[Token], i: int) -> bool:
    """Whether ``name(TABLE`` starts at ``i`` (a FROM item)."""
    return (i + 2 < len(tokens) and tokens[i].token_type is TokenType.VAR
            and tokens[i + 1].token_type is TokenType.L_PAREN
            and tokens[i + 2].token_type is TokenType.TABLE)


def read_user_table_function(text: str, tokens: list[Token], i: int,
                             read_window: WindowReader) -> FoundCall:
    """The call at ``i`` (``is_user_table_function``), with its window read by
    ``read_window``.
    """
    close = matching_paren(tokens, i + 1)
    if close is None:
        _fail(text, tokens[i + 1], f"{tokens[i].text}( is not closed with ')'")
    args = split_arguments(text, tokens[i + 2:close], tokens[close])
    stream, window, partition_by = _table_argument(text, args[0], read_window)
    rest = args[1:]
    if partition_by and args[0][-1].token_type is not TokenType.R_PAREN:
        # ``PARTITION BY a, b, 3``: names continue the list, the first literal ends it
        while rest and len(rest[0]) == 1 and rest[0][0].token_type is TokenType.VAR:
            partition_by = (*partition_by, rest[0][0].text)
            rest = rest[1:]
    values = tuple(_literal(text, arg) for arg in rest)
    call = TableFunctionCall(tokens[i].text, partition_by, values,
                             Location.of_span(text, tokens[i].start, tokens[close].end + 1),
                             Location.of_span(text, tokens[i].start, tokens[i].end + 1))
    return FoundCall(call, stream, window, close)


def _table_argument(text: str, arg: list[Token], read_window: WindowReader
                    ) -> tuple[Token, tuple[WindowSpec, Location] | None, tuple[str, ...]]:
    """``TABLE s [window] [PARTITION BY k | PARTITION BY (k, j)]``, or ``TABLE(s)``."""
    rest = arg[1:]
    if rest and rest[0].token_type is TokenType.L_PAREN:
        if len(rest) < 3 or rest[2].token_type is not TokenType.R_PAREN:
            _fail(text, rest[0], f"expected TABLE(stream) or TABLE stream: {_FORM}")
        stream, rest = rest[1], rest[3:]
    elif rest and rest[0].token_type is TokenType.VAR:
        stream, rest = rest[0], rest[1:]
    else:
        _fail(text, arg[0], f"expected the stream's name after TABLE: {_FORM}")
    window = None
    if rest and rest[0].token_type is TokenType.L_BRACKET:
        close = next((j for j, t in enumerate(rest) if t.token_type is TokenType.R_BRACKET),
                     None)
        if close is None:
            _fail(text, rest[0], "window clause is not closed with ']'")
        spec = read_window(rest[1:close], rest[close])
        window = (spec, Location.of_span(text, rest[0].start, rest[close].end + 1))
        rest = rest[close + 1:]
    if not rest:
        return stream, window, ()
    head = " ".join(rest[0].text.upper().split())
    if head == "PARTITION" and len(rest) > 1 and rest[1].text.upper() == "BY":
        head, rest = "PARTITION BY", rest[2:]
    else:
        rest = rest[1:]
    if head != "PARTITION BY":
        _fail(text, arg[len(arg) - len(rest) - 1],
              f"expected PARTITION BY or the end of the table argument: {_FORM}")
    names = [t for t in rest
             if t.token_type not in (TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA)]
    if not names or any(t.token_type is not TokenType.VAR for t in names):
        _fail(text, rest[0] if rest else arg[-1],
              "expected column names after PARTITION BY (several in parentheses)")
    return stream, window, tuple(t.text for t in names)


def _literal(text: str, arg: list[Token]) -> Any:
    """A constructor argument: a number, string, boolean, NULL or length of event time."""
    first = arg[0]
    if first.token_type is TokenType.INTERVAL:
        return duration_argument(text, arg)
    sign = 1
    if first.token_type is TokenType.DASH and len(arg) > 1:
        sign, arg = -1, arg[1:]
        first = arg[0]
    if first.token_type is TokenType.NUMBER:
        number = float(first.text) if any(c in first.text for c in ".eE") else int(first.text)
        if len(arg) == 2 and arg[1].text.upper() in DURATION_UNITS and sign > 0:
            if not isinstance(number, int):
                _fail(text, first, "a length of event time is a whole number of its unit")
            return Duration(number, arg[1].text.upper())
        if len(arg) == 1:
            return sign * number
    elif len(arg) == 1 and sign > 0:
        if first.token_type is TokenType.STRING:
            return first.text
        if first.token_type in (TokenType.TRUE, TokenType.FALSE):
            return first.token_type is TokenType.TRUE
        if first.token_type is TokenType.NULL:
            return None
    _fail(text, first, "a table function's arguments after the table are literals: "
          "numbers, strings, TRUE, FALSE, NULL or a length such as 5 SECONDS")


def _fail(text: str, tok: Token, message: str) -> NoReturn:
    raise QuerySyntaxError(message, text, Location.of_span(text, tok.start, tok.end + 1))
