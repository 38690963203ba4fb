"""Parse StreamAPAS query text (``docs/apas.md``) with the grammar in ``grammar.lark``.

The query may sit inside a SQL string (``CREATE QUERY q LANGUAGE apas AS '...'``), where
quotes are escaped: ``positions`` maps each character of the query to its offset in the
statement text, so every span, and every error, points into what the user wrote.
"""

from __future__ import annotations

import ast
from functools import cache
from importlib import resources

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.language.apas import syntax as s

_TERMINALS = {
    "LSQB": "'['", "RSQB": "']'", "LPAR": "'('", "RPAR": "')'", "COMMA": "','",
    "SEMICOLON": "';'", "EQUAL": "'='", "DOT": "'.'", "T": "'T'", "NAME": "a name",
    "REF": "a $name", "NUMBER": "a number", "STRING": "a string", "DURATION": "a duration",
    "SELECT": "'select'", "FROM": "'from'", "WHERE": "'where'", "COMPARE": "a comparison",
    "FORM": "'istream', 'dstream' or 'changelog'",
    "ADD": "'+'", "SUB": "'-'", "MUL": "'*'", "DIV": "'/'", "MOD": "'%'", "AND": "'and'",
    "OR": "'or'", "XOR": "'xor'", "NOT": "'not'", "TRUE": "'true'", "FALSE": "'false'",
}


@cache
def _grammar() -> Lark:
    text = resources.files("sparkcq.language.apas").joinpath("grammar.lark").read_text()
    return Lark(text, start="program", parser="lalr", propagate_positions=True,
                maybe_placeholders=True)


def parse_program(code: str, text: str | None = None,
                  positions: list[int] | None = None) -> s.Program:
    """Parse query ``code``; spans point into ``text`` through ``positions`` (the offset in
    ``text`` of each character of ``code``; both default to ``code`` itself).
    """
    text = code if text is None else text
    where = positions if positions is not None else list(range(len(code)))
    end = where[-1] + 1 if where else len(text)
    where = [*where, end]  # the end of the code
    try:
        tree = _grammar().parse(code)
    except UnexpectedInput as e:
        raise _syntax_error(e, code, text, where) from None
    return _Build(text, where).transform(tree)


def unquote_positions(text: str, start: int, end: int, value: str) -> list[int]:
    """The offsets in ``text`` of each character of ``value``, the unescaped content of the
    string literal whose quotes sit at ``start`` and ``end - 1`` (a backslash escape or a
    doubled quote is two characters of ``text`` for one of ``value``).
    """
    raw = text[start + 1 : end - 1]
    quote = text[start] if start < len(text) else "'"
    out: list[int] = []
    j = 0
    for _ in value:
        out.append(start + 1 + min(j, max(0, len(raw) - 1)))
        if j < len(raw) and raw[j] == "\\":
            j += 2
        elif j + 1 < len(raw) and raw[j] == quote and raw[j + 1] == quote:
            j += 2
        else:
            j += 1
    return out


def quote_query(code: str) -> str:
    """``code`` as a SQL string literal of the Spark dialect (backslash escapes)."""
    return "'" + code.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _syntax_error(e: UnexpectedInput, code: str, text: str,
                  where: list[int]) -> QuerySyntaxError:
    pos = getattr(e, "pos_in_stream", None)
    if isinstance(e, UnexpectedToken) and e.token.type == "$END":
        pos = len(code)
    if pos is None or isinstance(e, UnexpectedEOF):
        pos = len(code)
    length = 1
    if isinstance(e, UnexpectedToken):
        found = "the end of the query" if e.token.type == "$END" else repr(str(e.token))
        length = max(1, len(str(e.token))) if e.token.type != "$END" else 1
        expected = sorted({_TERMINALS.get(t, t.lower()) for t in e.expected})
        msg = f"syntax error: expected {_one_of(expected)}, found {found}"
    elif isinstance(e, UnexpectedCharacters):
        msg = f"syntax error: unexpected character {code[pos]!r}"
    else:
        msg = "syntax error: the query ends too early"
    start = where[min(pos, len(where) - 1)]
    stop = where[min(pos + length, len(where) - 1)] if pos + length <= len(code) else start + 1
    return QuerySyntaxError(msg, text, Location.of_span(text, start, max(stop, start + 1)))


def _one_of(words: list[str]) -> str:
    if len(words) == 1:
        return words[0]
    return "one of " + ", ".join(words)


@v_args(meta=True)
class _Build(Transformer):
    """Lark's parse tree to ``syntax`` nodes with spans into the statement text."""

    def __init__(self, text: str, where: list[int]):
        super().__init__()
        self.text = text
        self.offsets = where

    def span(self, meta) -> s.Span:  # noqa: ANN001 - lark's Meta
        return s.Span(self.offsets[meta.start_pos], self.offsets[meta.end_pos - 1] + 1)

    def token_span(self, tok: Token) -> s.Span:
        assert tok.start_pos is not None and tok.end_pos is not None
        return s.Span(self.offsets[tok.start_pos], self.offsets[tok.end_pos - 1] + 1)

    def program(self, meta, children):  # noqa: ANN001, ANN201, D102
        *steps, final = children
        return s.Program(tuple(steps), final, self.text)

    def step(self, meta, children):  # noqa: ANN001, ANN201, D102
        where = children[0]
        name = next(c for c in children[1:] if isinstance(c, Token) and c.type == "NAME")
        tree = next(c for c in children if isinstance(c, s.Tree))
        return s.Step(str(name), where, tree, self.span(meta), self.token_span(name))

    def final(self, meta, children):  # noqa: ANN001, ANN201, D102
        where = children[0]
        select = next(c for c in children[1:] if isinstance(c, Token) and c.type == "SELECT")
        form = next((str(c).lower() for c in children[1:]
                     if isinstance(c, Token) and c.type == "FORM"), "intervals")
        tree = next(c for c in children if isinstance(c, s.Tree))
        return s.Step(None, where, tree, self.span(meta), self.token_span(select), form)

    def where(self, meta, children):  # noqa: ANN001, ANN201, D102
        return children[1]

    def tree(self, meta, children):  # noqa: ANN001, ANN201, D102
        items = tuple(c for c in children if c is not None)
        return s.Tree(items, self.span(meta))

    def assign(self, meta, children):  # noqa: ANN001, ANN201, D102
        path, value = children
        return s.Assign(path, value, self.span(meta))

    def nested(self, meta, children):  # noqa: ANN001, ANN201, D102
        name, tree = children
        return s.Assign((str(name),), tree, self.span(meta))

    def local(self, meta, children):  # noqa: ANN001, ANN201, D102
        return s.Local(children[0], self.span(meta))

    def attr_path(self, meta, children):  # noqa: ANN001, ANN201, D102
        return tuple(str(c) for c in children)

    def ref(self, meta, children):  # noqa: ANN001, ANN201, D102
        return s.Reference(str(children[0])[1:], tuple(str(c) for c in children[1:]),
                           self.span(meta))

    def subtree(self, meta, children):  # noqa: ANN001, ANN201, D102
        return s.SubTree(children[0], self.span(meta))

    def whole_input(self, meta, children):  # noqa: ANN001, ANN201, D102
        span = self.span(meta)
        return s.SubTree(s.Reference(s.STEP_INPUT, (), span), span)

    def attribute(self, meta, children):  # noqa: ANN001, ANN201, D102
        return children[0]

    def call(self, meta, children):  # noqa: ANN001, ANN201, D102
        library, function, *rest = children
        args = tuple(a for a in rest if a is not None and not isinstance(a, Token))
        path = tuple(str(a) for a in rest if isinstance(a, Token))
        return s.Call(str(library), str(function), args, self.span(meta), path)

    def binary(self, meta, children):  # noqa: ANN001, ANN201, D102
        left, op, right = children
        return s.Binary(_operator(op), left, right, self.span(meta))

    def unary(self, meta, children):  # noqa: ANN001, ANN201, D102
        op, operand = children
        which = s.Operator.NEG if op.type == "SUB" else s.Operator.NOT
        return s.Unary(which, operand, self.span(meta))

    def number(self, meta, children):  # noqa: ANN001, ANN201, D102
        tok = children[0]
        text = str(tok)
        if any(c in text for c in ".eE"):
            return s.Literal(s.LiteralKind.DOUBLE, float(text), self.token_span(tok))
        return s.Literal(s.LiteralKind.INTEGER, int(text), self.token_span(tok))

    def duration(self, meta, children):  # noqa: ANN001, ANN201, D102
        tok = children[0]
        text = str(tok)
        digits = len(text) - len(text.lstrip("0123456789"))
        return s.Literal(s.LiteralKind.DURATION, (int(text[:digits]), text[digits:]),
                         self.token_span(tok))

    def string(self, meta, children):  # noqa: ANN001, ANN201, D102
        tok = children[0]
        raw = str(tok)
        value = ast.literal_eval(raw)
        return s.Literal(s.LiteralKind.STRING, value, self.token_span(tok))

    def boolean(self, meta, children):  # noqa: ANN001, ANN201, D102
        tok = children[0]
        return s.Literal(s.LiteralKind.BOOLEAN, tok.type == "TRUE", self.token_span(tok))


def _operator(tok: Token) -> s.Operator:
    text = str(tok)
    return s.Operator(text.upper() if text.isalpha() else text)

