"""``INSERT INTO table [(columns)] VALUES (...), ...``: the rows as Python values.

Values are literals (numbers, strings, ``NULL``, ``true``/``false``, ``TIMESTAMP '...'``,
``DATE '...'``, a minus sign before a number): a table is filled with data, not computed, so
no function runs here, and the rows then pass the same typed door as pushed rows do. A
continuous insert of a query's results is ``CREATE QUERY ... INTO``.
"""

from __future__ import annotations

from typing import Any

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.language.sql.statements import InsertValues


def read_insert(text: str, tokens: list[Token]) -> InsertValues:
    """The INSERT statement that ``tokens`` (all of it) spell."""
    start, end = tokens[0].start, tokens[-1].end + 1
    loc = Location.of_span(text, start, end)
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
        msg = ("INSERT INTO a table takes VALUES (...); a query's results go into a sink "
               "with CREATE QUERY name INTO sink AS SELECT ...")
        raise QuerySyntaxError(msg, text, loc)
    rows = []
    for number, row in enumerate(values.expressions, 1):
        items = row.expressions if isinstance(row, exp.Tuple) else [row]
        rows.append(tuple(_literal(item, number, text, loc) for item in items))
    return InsertValues(target.name, columns, tuple(rows), loc, at)


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
