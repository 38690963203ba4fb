"""``INSERT INTO table [(columns)] VALUES (...), ...``: the rows as Python values.

Values are literals (numbers, strings, ``NULL``, ``true``/``false``, ``TIMESTAMP '...'``,
``DATE '...'``, a minus sign before a number): a table is filled with data, not computed, so
no function runs here, and the rows then pass the same typed door as pushed rows do. A
continuous insert of a query's results is ``CREATE QUERY ... INTO``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.language.sql.statements import InsertSelect, InsertValues, SelectText


def read_insert(text: str, tokens: list[Token],
                read_select: Callable[[list[Token]], SelectText]) -> InsertValues | InsertSelect:
    """The INSERT statement that ``tokens`` (all of it) spell; ``read_select`` reads the
    tokens of a SELECT as a query's (the parser's, which cuts out window clauses).
    """
    start, end = tokens[0].start, tokens[-1].end + 1
    loc = Location.of_span(text, start, end)
    select_at = next((i for i, t in enumerate(tokens) if t.token_type is TokenType.SELECT), None)
    if select_at is not None:
        return _insert_select(text, tokens, select_at, loc, read_select)
    try:
        tree = sqlglot.parse_one(text[start:end], read="spark")
    except (ParseError, TokenError) as e:
        msg = f"syntax error in INSERT: {str(e).split('. Line')[0]}"
        raise QuerySyntaxError(msg, text, loc) from None
    if not isinstance(tree, exp.Insert):
        msg = "expected INSERT INTO table [(columns)] VALUES (...), ..."
        raise QuerySyntaxError(msg, text, loc)
    target = tree.this
    columns: tuple[str, ...] = ()
    if isinstance(target, exp.Schema):
        columns = tuple(c.name for c in target.expressions)
        target = target.this
    name_tok = next((t for t in tokens[2:] if t.text.lower() == target.name.lower()), tokens[0])
    at = Location.of_span(text, name_tok.start, name_tok.end + 1)
    if tree.args.get("overwrite"):
        msg = ("INSERT OVERWRITE is not supported; Engine.load_table or REFRESH TABLE "
               "replaces a table's rows")
        raise QuerySyntaxError(msg, text, loc)
    values = tree.expression
    if not isinstance(values, exp.Values):
        msg = "expected INSERT INTO table [(columns)] VALUES (...) or SELECT ..."
        raise QuerySyntaxError(msg, text, loc)
    rows = []
    for number, row in enumerate(values.expressions, 1):
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        rows.append(tuple(_literal(item, number, text, loc) for item in items))
    return InsertValues(target.name, columns, tuple(rows), loc, at)


def _insert_select(text: str, tokens: list[Token], select_at: int, loc: Location,
                   read_select: Callable[[list[Token]], SelectText]) -> InsertSelect:
    """``INSERT INTO t [(columns)] SELECT ...``: the head read here, the SELECT as a
    query's (with its window clauses cut out, so a window says where it is wrong).
    """
    head = tokens[:select_at]
    if len(head) < 3 or head[1].token_type is not TokenType.INTO:
        msg = "expected INSERT INTO table [(columns)] SELECT ..."
        raise QuerySyntaxError(msg, text, loc)
    name_tok = head[2]
    columns = tuple(t.text for t in head[3:] if t.token_type not in (
        TokenType.L_PAREN, TokenType.R_PAREN, TokenType.COMMA))
    at = Location.of_span(text, name_tok.start, name_tok.end + 1)
    select = read_select(tokens[select_at:])
    return InsertSelect(name_tok.text, columns, select, loc, at)


def _literal(node: exp.Expression, row: int, text: str, loc: Location) -> Any:
    """The Python value of one literal of VALUES (ISO text for a timestamp or date)."""
    if isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        number = float(node.this)
        return int(number) if number.is_integer() and "." not in node.this \
            and "e" not in node.this.lower() else number
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal) and not node.this.is_string:
        return -_literal(node.this, row, text, loc)
    if (isinstance(node, exp.Cast) and isinstance(node.this, exp.Literal) and node.this.is_string
            and node.to.is_type("timestamp", "timestamptz", "timestampntz", "date")):
        return node.this.this
    msg = (f"row {row} of VALUES: {node.sql(dialect='spark')} is not a literal; give numbers, "
           "'text', NULL, true/false, TIMESTAMP '...' or DATE '...'")
    raise QuerySyntaxError(msg, text, loc)
