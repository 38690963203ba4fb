"""Flink's window table functions and Spark's ``window()`` call, read into windows.

Flink writes a window as a table function in FROM,

    FROM TABLE(HOP(TABLE bids, DESCRIPTOR(t), INTERVAL '5' SECONDS, INTERVAL '10' SECONDS))

(arguments by position or by name, ``DATA => TABLE bids, TIMECOL => DESCRIPTOR(t), ...``);
Spark writes it as a call in GROUP BY, ``GROUP BY window(t, '10 seconds', '5 seconds')``.
Neither parses as Spark SQL, so, like a window clause, each is cut out of the text before
sqlglot reads it: the table function leaves the stream's name (``bids`` padded with blanks),
the call leaves a column of the same length (``_w52______``) that the binder reads as the
window's ``window`` struct. Offsets into the text stay the user's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from sqlglot.tokens import Token, TokenType

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.model.time import DURATION_UNITS, Duration
from sparkcq.model.windows import AssignedKind, AssignedWindow, BoundsNaming

#: Flink's window table functions and the names of their arguments after the time column
_PARAMETERS = {
    "TUMBLE": ("SIZE",),
    "HOP": ("SLIDE", "SIZE"),
    "CUMULATE": ("STEP", "SIZE"),
    "SESSION": ("GAP",),
}
_FLINK_FORMS = ("TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10' SECONDS)), "
                "TABLE(HOP(TABLE s, DESCRIPTOR(t), slide, size)) or "
                "TABLE(CUMULATE(TABLE s, DESCRIPTOR(t), step, size))")
#: the prefix of the column a Spark ``window(...)`` call leaves in the text
WINDOW_CALL_PREFIX = "_w"


@dataclass(frozen=True)
class CutWindowFunction:
    """A window function found in the token list: the tokens it spans, the window, and the
    stream it reads (Flink's) or the column it leaves (Spark's).
    """

    first: int  # index of its first token
    last: int  # index of its last token
    window: AssignedWindow
    stream: Token | None  # Flink's: the table it reads
    loc: Location


def matching_paren(tokens: list[Token], i: int, opening: TokenType = TokenType.L_PAREN,
                   closing: TokenType = TokenType.R_PAREN) -> int | None:
    """The index of the ``)`` closing the ``(`` at ``i`` (or of another pair of tokens:
    ``]`` and ``[``); None if it is not closed.
    """
    depth = 0
    for j in range(i, len(tokens)):
        if tokens[j].token_type is opening:
            depth += 1
        elif tokens[j].token_type is closing:
            depth -= 1
            if depth == 0:
                return j
    return None


def is_table_function(tokens: list[Token], i: int) -> bool:
    """Whether ``TABLE(<function>(`` starts at ``i`` (after FROM, JOIN or a comma)."""
    return (tokens[i].token_type is TokenType.TABLE and i + 3 < len(tokens)
            and tokens[i + 1].token_type is TokenType.L_PAREN
            and tokens[i + 3].token_type is TokenType.L_PAREN)


def is_window_call(tokens: list[Token], i: int) -> bool:
    """Whether Spark's ``window(`` or ``session_window(`` starts at ``i`` (``WINDOW w AS
    (...)`` does not).
    """
    return ((tokens[i].token_type is TokenType.WINDOW
             or tokens[i].text.lower() == "session_window")
            and i + 1 < len(tokens) and tokens[i + 1].token_type is TokenType.L_PAREN)


def read_table_function(text: str, tokens: list[Token], i: int) -> CutWindowFunction:
    """``TABLE(TUMBLE(TABLE s, DESCRIPTOR(t), INTERVAL '10' SECONDS))`` from ``i``."""
    close = matching_paren(tokens, i + 1)
    if close is None:
        _fail(text, tokens[i], "TABLE( is not closed with ')'")
    name_tok = tokens[i + 2]
    function = name_tok.text.upper()
    loc = Location.of_span(text, tokens[i].start, tokens[close].end + 1)
    if function not in _PARAMETERS:
        _fail(text, name_tok, f"unknown window table function {name_tok.text!r}; "
              f"write {_FLINK_FORMS}")
    inner_close = matching_paren(tokens, i + 3)
    if inner_close != close - 1:
        _fail(text, tokens[close - 1] if inner_close is None else tokens[inner_close + 1],
              f"expected ')' closing TABLE({function}(...))")
    args = split_arguments(text, tokens[i + 4: close - 1], tokens[close - 1])
    names = ("DATA", "TIMECOL", *_PARAMETERS[function])
    if len(args) > len(names):
        _fail(text, args[len(names)][0], f"{function} takes {len(names)} arguments: the "
              f"table, the time column and {' and '.join(_PARAMETERS[function]).lower()}; "
              "an offset is not supported")
    by_name: dict[str, list[Token]] = {}
    for position, arg in enumerate(args):
        name, value = _named(text, arg)
        key = name.text.upper() if name is not None else names[position]
        if key not in names:
            _fail(text, name or arg[0], f"{function} has no argument {key}; its arguments: "
                  f"{', '.join(names)}")
        by_name[key] = value
    for key in names:
        if key not in by_name:
            at = tokens[close - 1]
            _fail(text, at, f"{function} needs its {key} argument: {_FLINK_FORMS}")
    stream, partition_by = _table_argument(text, by_name["DATA"], function == "SESSION")
    time_column = _descriptor(text, by_name["TIMECOL"])
    durations = {key: duration_argument(text, by_name[key]) for key in _PARAMETERS[function]}
    size = durations.get("SIZE") or durations["GAP"]
    step = durations.get("SLIDE") or durations.get("STEP") or size
    window = AssignedWindow(AssignedKind[function], time_column, size, step, BoundsNaming.FLINK,
                            partition_by)
    return CutWindowFunction(i, close, window, stream, loc)


def read_window_call(text: str, tokens: list[Token], i: int) -> CutWindowFunction:
    """Spark's ``window(t, '10 seconds'[, '5 seconds'])`` from ``i``."""
    close = matching_paren(tokens, i + 1)
    if close is None:
        _fail(text, tokens[i], "window( is not closed with ')'")
    loc = Location.of_span(text, tokens[i].start, tokens[close].end + 1)
    args = split_arguments(text, tokens[i + 2: close], tokens[close])
    if tokens[i].text.lower() == "session_window":
        if len(args) != 2:
            _fail(text, args[2][0] if len(args) > 2 else tokens[close],
                  "session_window(time column, gap) takes two arguments")
        gap = _spark_duration(text, args[1])
        window = AssignedWindow(AssignedKind.SESSION, args[0][0].text, gap, gap,
                                BoundsNaming.SPARK)
        return CutWindowFunction(i, close, window, None, loc)
    if len(args) not in (2, 3):
        at = args[3][0] if len(args) > 3 else tokens[close]
        _fail(text, at, "window(time column, duration[, slide]) takes two or three "
              "arguments; a start time is not supported")
    if len(args[0]) != 1 or args[0][0].token_type not in (TokenType.VAR, TokenType.IDENTIFIER):
        _fail(text, args[0][0], "expected the stream's time column as window()'s first "
              "argument")
    size = _spark_duration(text, args[1])
    step = _spark_duration(text, args[2]) if len(args) == 3 else size
    kind = AssignedKind.TUMBLE if step == size else AssignedKind.HOP
    window = AssignedWindow(kind, args[0][0].text, size, step, BoundsNaming.SPARK)
    return CutWindowFunction(i, close, window, None, loc)


#: Flink's group window functions (deprecated there), refused with the form to write
#: instead
_REFUSED_CALLS = {
    **{f"{kind}{part}": "flink" for kind in ("TUMBLE", "HOP", "SESSION")
       for part in ("", "_START", "_END", "_ROWTIME", "_PROCTIME")},
}


def refuse_window_call(text: str, tokens: list[Token], i: int) -> None:
    """Raise for a window function sparkcq does not run, naming what to write instead:
    Flink's ``GROUP BY TUMBLE(ts, INTERVAL '10' SECOND)`` and its ``TUMBLE_START``.
    """
    word = tokens[i].text.upper()
    if (word not in _REFUSED_CALLS or i + 1 >= len(tokens)
            or tokens[i + 1].token_type is not TokenType.L_PAREN):
        return
    _fail(text, tokens[i], f"Flink's group window function {tokens[i].text}(...) is not "
          "supported (Flink deprecates it too); write the window table function: "
          "FROM TABLE(TUMBLE(TABLE s, DESCRIPTOR(ts), INTERVAL '10' SECONDS)) ... "
          "GROUP BY window_start, window_end")


def window_call_column(offset: int, length: int) -> str:
    """The column name a ``window(...)`` call at ``offset`` of ``length`` characters
    leaves in the text: as long as the call, so every offset after it stays the user's.
    """
    return f"{WINDOW_CALL_PREFIX}{offset}".ljust(length, "_")


def split_arguments(text: str, tokens: list[Token], close: Token) -> list[list[Token]]:
    """The tokens of each argument, split at the commas outside parentheses and brackets
    (a window clause's ``[CUT ON a, b]``).
    """
    args: list[list[Token]] = [[]]
    depth = 0
    for tok in tokens:
        if tok.token_type is TokenType.COMMA and depth == 0:
            args.append([])
            continue
        depth += {TokenType.L_PAREN: 1, TokenType.R_PAREN: -1, TokenType.L_BRACKET: 1,
                  TokenType.R_BRACKET: -1}.get(tok.token_type, 0)
        args[-1].append(tok)
    for arg in args:
        if not arg:
            _fail(text, close, "expected an argument")
    return args


def _named(text: str, arg: list[Token]) -> tuple[Token | None, list[Token]]:
    """``NAME => value`` as its name and value; a positional argument has no name."""
    if len(arg) > 2 and arg[1].token_type is TokenType.FARROW:
        return arg[0], arg[2:]
    return None, arg


def _table_argument(text: str, arg: list[Token], partitioned: bool
                    ) -> tuple[Token, tuple[str, ...]]:
    """``TABLE s`` (and for SESSION ``TABLE s PARTITION BY k`` or ``PARTITION BY (k, j)``):
    the stream's name and the partition's columns.
    """
    if arg[0].token_type is not TokenType.TABLE or len(arg) < 2:
        _fail(text, arg[0], "expected TABLE and the stream's name as the first argument")
    if len(arg) == 2:
        return arg[1], ()
    head, rest = " ".join(arg[2].text.upper().split()), arg[3:]
    if head == "PARTITION" and rest and rest[0].text.upper() == "BY":
        head, rest = "PARTITION BY", rest[1:]
    if not partitioned or head != "PARTITION BY":
        _fail(text, arg[2], "expected TABLE and the stream's name as the first argument"
              + (" (then PARTITION BY columns)" if partitioned else ""))
    names = [t.text for t in rest
             if t.token_type not in (TokenType.COMMA, TokenType.L_PAREN, TokenType.R_PAREN)]
    if not names:
        _fail(text, arg[-1], "expected the columns after PARTITION BY")
    return arg[1], tuple(names)


def _descriptor(text: str, arg: list[Token]) -> str:
    if (len(arg) != 4 or arg[0].text.upper() != "DESCRIPTOR"
            or arg[1].token_type is not TokenType.L_PAREN):
        _fail(text, arg[0], "expected DESCRIPTOR(time column) as the second argument")
    return arg[2].text


def duration_argument(text: str, arg: list[Token]) -> Duration:
    """``INTERVAL '10' SECONDS`` or ``INTERVAL '10 SECONDS'``; a bare number for a
    stream whose time is a number.
    """
    if len(arg) == 1 and arg[0].token_type is TokenType.NUMBER:
        return Duration(_whole(text, arg[0], arg[0].text))
    if arg[0].token_type is not TokenType.INTERVAL or len(arg) not in (2, 3):
        _fail(text, arg[0], "expected a duration such as INTERVAL '10' SECONDS")
    if len(arg) == 3:
        return Duration(_whole(text, arg[1], arg[1].text), _unit(text, arg[2], arg[2].text))
    amount, _, unit = arg[1].text.strip().partition(" ")
    return Duration(_whole(text, arg[1], amount), _unit(text, arg[1], unit.strip()))


def _spark_duration(text: str, arg: list[Token]) -> Duration:
    """Spark's ``'10 seconds'`` (or ``INTERVAL 10 SECONDS``, or a number for a stream
    whose time is a number).
    """
    if arg[0].token_type is TokenType.INTERVAL or (
            len(arg) == 1 and arg[0].token_type is TokenType.NUMBER):
        return duration_argument(text, arg)
    if len(arg) != 1 or arg[0].token_type is not TokenType.STRING:
        _fail(text, arg[0], "expected a duration such as '10 seconds'")
    words = arg[0].text.split()
    if len(words) == 3 and words[0].lower() == "interval":
        words = words[1:]
    if len(words) != 2:
        _fail(text, arg[0], f"expected a duration such as '10 seconds', found {arg[0].text!r}")
    return Duration(_whole(text, arg[0], words[0]), _unit(text, arg[0], words[1]))


def _whole(text: str, tok: Token, amount: str) -> int:
    if not amount.isdigit() or int(amount) <= 0:
        _fail(text, tok, f"expected a positive whole number of time units, found {amount!r}")
    return int(amount)


def _unit(text: str, tok: Token, unit: str) -> str:
    if unit.upper() not in DURATION_UNITS:
        _fail(text, tok, f"unknown time unit {unit!r}; expected SECONDS, MINUTES, HOURS, "
              "DAYS or MILLISECONDS")
    return unit.upper()


def _fail(text: str, tok: Token, message: str) -> NoReturn:
    raise QuerySyntaxError(message, text, Location.of_span(text, tok.start, tok.end + 1))
