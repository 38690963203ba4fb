"""Parse the streaming SQL dialect: statements around a Spark SQL SELECT with window clauses.

The statement head (CREATE STREAM ..., DROP ..., EXPLAIN ...) is read from sqlglot's tokens by
a small recursive-descent parser. A SELECT is handed to sqlglot's Spark dialect after its
window clauses (``s [RANGE 10]``) and ``STREAM(s, '...')`` table functions are cut out and
replaced by blanks of the same length, so every offset sqlglot reports is still an offset into
the user's text and errors point at the right line and column.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import NoReturn

import sqlglot
import sqlglot.expressions as exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

from sparkcq.errors import Location, QuerySyntaxError
from sparkcq.language.apas.parser import parse_program, unquote_positions
from sparkcq.language.sql.insert import read_insert
from sparkcq.language.sql.statements import (
    ApasText,
    ColumnDef,
    CreateAggregate,
    CreateLibrary,
    CreateQuery,
    CreateStream,
    CreateStreamAs,
    CreateTable,
    CreateTableFunction,
    Drop,
    Explain,
    ExplainFormat,
    ObjectKind,
    Options,
    OutputForm,
    Refresh,
    SelectText,
    Show,
    ShowTarget,
    SourceWindow,
    Statement,
    TableFunctionCall,
)
from sparkcq.language.sql.table_function_calls import (
    is_user_table_function,
    read_user_table_function,
)
from sparkcq.language.sql.window_functions import (
    is_table_function,
    is_window_call,
    matching_paren,
    read_table_function,
    read_window_call,
    refuse_window_call,
    window_call_column,
)
from sparkcq.model.time import DURATION_UNITS, Duration
from sparkcq.model.windows import (
    CountCutWindow,
    CutWindow,
    KeyCutWindow,
    LookupTime,
    NowWindow,
    RangeWindow,
    RowsWindow,
    SessionWindow,
    UnboundedWindow,
    WindowSpec,
)

_DIALECT = sqlglot.Dialect.get_or_raise("spark")
_WINDOW_WORDS = {"RANGE", "ROWS", "NOW", "UNBOUNDED", "PARTITION", "PARTITION BY", "CUT",
                 "SESSION"}
_FORM_WORDS = {form.name: form for form in OutputForm if form is not OutputForm.INTERVALS}
_FROM_ITEM_LEADS = {TokenType.FROM, TokenType.JOIN, TokenType.COMMA}


def parse_script(text: str) -> list[Statement]:
    """Parse every statement of a script (statements separated by semicolons)."""
    return [stmt for stmt, _ in parse_script_located(text)]


def parse_script_located(text: str) -> list[tuple[Statement, Location]]:
    """Parse every statement of a script, each with the place of its text in ``text``.

    The whole script is parsed before anything runs, so a syntax error anywhere is raised
    before any statement took effect.
    """
    tokens = _tokenize(text, 0)
    statements: list[tuple[Statement, Location]] = []
    start = 0
    depth = 0
    for i, tok in enumerate(tokens):
        if tok.token_type in (TokenType.L_PAREN, TokenType.L_BRACKET):
            depth += 1
        elif tok.token_type in (TokenType.R_PAREN, TokenType.R_BRACKET):
            depth -= 1
        elif tok.token_type is TokenType.SEMICOLON and depth <= 0:
            if i > start:
                statements.append(_parse_located(text, tokens[start:i]))
            start = i + 1
    if start < len(tokens):
        statements.append(_parse_located(text, tokens[start:]))
    return statements


def _parse_located(text: str, tokens: list[Token]) -> tuple[Statement, Location]:
    return _parse_tokens(text, tokens), _span(text, tokens[0], tokens[-1])


def _parse_tokens(text: str, tokens: list[Token]) -> Statement:
    """Parse one statement; re-read the tail of commands sqlglot keeps as one raw string."""
    if (
        len(tokens) == 2
        and tokens[0].text.upper() in ("EXPLAIN", "SHOW")
        and tokens[1].token_type is TokenType.STRING
    ):
        begin, end = tokens[0].end + 1, tokens[1].end + 1
        rest = [
            Token(t.token_type, t.text, t.line, t.col, t.start + begin, t.end + begin)
            for t in _tokenize(text[begin:end], begin)
        ]
        tokens = [tokens[0], *rest]
    return _StatementParser(text, tokens).parse()


def parse_statement(text: str) -> Statement:
    """Parse exactly one statement; a trailing semicolon is allowed."""
    statements = parse_script(text)
    if len(statements) != 1:
        loc = Location.of_span(text, 0, len(text))
        msg = f"expected one statement, found {len(statements)}"
        raise QuerySyntaxError(msg, text, loc)
    return statements[0]


def _tokenize(text: str, offset: int) -> list[Token]:
    try:
        return list(_DIALECT.tokenize(text))
    except TokenError as e:
        loc = Location.of_span(text, offset, len(text))
        msg = f"cannot read the query text: {e}"
        raise QuerySyntaxError(msg, text, loc) from None


def _span(text: str, first: Token, last: Token | None = None) -> Location:
    """The place of the tokens ``first`` to ``last`` in ``text``."""
    last = last or first
    return Location.of_span(text, first.start, last.end + 1)


@dataclass
class _StatementParser:
    """Recursive descent over one statement's tokens."""

    text: str
    tokens: list[Token]
    pos: int = 0

    # -- token helpers -------------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def word(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        if tok is None or tok.token_type is TokenType.STRING:
            return ""
        return tok.text.upper()

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            self.fail_at_end("the statement ends too early")
        self.pos += 1
        return tok

    def accept(self, *words: str) -> Token | None:
        if self.word() in words:
            return self.next()
        return None

    def expect(self, *words: str) -> Token:
        tok = self.peek()
        if tok is None or self.word() not in words:
            self.fail(f"expected {' or '.join(words)}", tok)
        return self.next()

    def expect_type(self, kind: TokenType, what: str) -> Token:
        tok = self.peek()
        if tok is None or tok.token_type is not kind:
            self.fail(f"expected {what}", tok)
        return self.next()

    def fail(self, message: str, tok: Token | None) -> NoReturn:
        if tok is None:
            self.fail_at_end(message)
        found = tok.text if tok.token_type is not TokenType.STRING else repr(tok.text)
        msg = f"{message}, found {found!r}" if message.startswith("expected") else message
        raise QuerySyntaxError(msg, self.text, _span(self.text, tok))

    def fail_at_end(self, message: str) -> NoReturn:
        end = self.tokens[-1].end + 1 if self.tokens else len(self.text)
        loc = Location.of_span(self.text, end, end + 1)
        msg = f"{message}, found the end of the statement"
        raise QuerySyntaxError(msg, self.text, loc)

    def name(self, what: str) -> Token:
        tok = self.peek()
        if tok is None or tok.token_type in (
            TokenType.STRING,
            TokenType.NUMBER,
            TokenType.L_PAREN,
            TokenType.R_PAREN,
            TokenType.COMMA,
            TokenType.SEMICOLON,
        ):
            self.fail(f"expected {what}", tok)
        return self.next()

    def done(self) -> None:
        tok = self.peek()
        if tok is not None:
            self.fail("unexpected text after the end of the statement", tok)

    # -- statements ----------------------------------------------------------------------
    def parse(self) -> Statement:
        first = self.peek()
        assert first is not None
        head = self.word()
        if head == "CREATE":
            return self.create()
        if head == "DROP":
            return self.drop()
        if head == "REFRESH":
            first_tok = self.next()
            self.expect("TABLE")
            name_tok = self.name("the name of the table to refresh")
            self.done()
            return Refresh(name_tok.text, _span(self.text, first_tok, name_tok))
        if head == "EXPLAIN":
            return self.explain()
        if head == "SHOW":
            self.next()
            what = self.expect("STREAMS", "TABLES", "QUERIES", "FUNCTIONS", "AGGREGATES")
            self.done()
            return Show(ShowTarget(what.text.upper()))
        if head == "INSERT":
            return read_insert(self.text, self.tokens, lambda tokens: cut_windows_and_parse(
                self.text, tokens, OutputForm.INTERVALS))
        if head in ("SELECT", "WITH", "(") or head in _FORM_WORDS:
            select = self.select()
            return CreateQuery(name="", select=select, loc=_span(self.text, first))
        self.fail("expected CREATE, DROP, REFRESH, INSERT, EXPLAIN, SHOW or SELECT", first)

    def create(self) -> Statement:
        first = self.next()
        kind = self.expect("STREAM", "TABLE", "QUERY", "AGGREGATE", "LIBRARY", "FUNCTION")
        name_tok = self.name(f"a name for the {kind.text.lower()}")
        loc = _span(self.text, first, name_tok)
        at = _span(self.text, name_tok)
        name = name_tok.text
        if kind.text.upper() == "AGGREGATE":
            return self.create_aggregate(name, loc, at)
        if kind.text.upper() == "FUNCTION":
            return self.create_table_function(name, loc, at)
        if kind.text.upper() == "LIBRARY":
            self.expect("USING")
            module = self.expect_type(TokenType.STRING, "'package.module' after USING")
            self.done()
            return CreateLibrary(name, module.text, loc, at)
        if kind.text.upper() == "QUERY":
            options = Options()
            if self.accept("INTO"):
                sink = self.name("a sink name after INTO")
                options = Options({"sink": sink.text}, {"sink": _span(self.text, sink)})
            if self.accept("WITH"):
                given = self.options()
                options = Options({**options, **given},
                                  {**options.value_spans, **given.value_spans},
                                  given.assignment_spans)
            if self.accept("LANGUAGE"):
                return CreateQuery(name, self.language(), options, loc, at)
            self.expect("AS")
            return CreateQuery(name, self.select(), options, loc, at)
        if kind.text.upper() == "STREAM" and self.word() in ("AS", "WITH") and self._derived():
            options = self.options() if self.accept("WITH") else Options()
            self.expect("AS")
            return CreateStreamAs(name, self.select(), options, loc, at)
        from_options = self.word() == "WITH"  # a PostgreSQL table's, a feed stream's
        columns = () if from_options else self.columns()
        options = self.options() if self.accept("WITH") else Options()
        self.done()
        if kind.text.upper() == "STREAM":
            return CreateStream(name, columns, options, loc, at)
        return CreateTable(name, columns, options, loc, at)

    def create_aggregate(self, name: str, loc: Location, at: Location) -> CreateAggregate:
        """``(arg TYPE, ...) RETURNS TYPE USING 'module:Class'`` after the name."""
        params = self.columns()
        self.expect("RETURNS")
        type_toks: list[Token] = []
        while self.peek() is not None and self.word() != "USING":
            type_toks.append(self.next())
        if not type_toks:
            self.fail("expected the aggregate's return type after RETURNS", self.peek())
        returns = self.text[type_toks[0].start : type_toks[-1].end + 1]
        self.expect("USING")
        path = self.expect_type(TokenType.STRING, "'module:Class' after USING")
        self.done()
        return CreateAggregate(name, params, returns, path.text, loc, at)

    def create_table_function(self, name: str, loc: Location, at: Location
                              ) -> CreateTableFunction:
        """``([param TYPE, ...]) RETURNS TABLE (col TYPE, ...) USING 'module:Class'`` after
        the name.
        """
        params: tuple[ColumnDef, ...] = ()
        if self.word(1) == ")":
            self.expect("(")
            self.expect(")")
        else:
            params = self.columns()
        self.expect("RETURNS")
        if self.word() != "TABLE":
            self.fail("a function made by CREATE FUNCTION returns rows: write RETURNS TABLE "
                      "(col TYPE, ...); a scalar Python function is made with "
                      "Engine.create_function", self.peek())
        self.expect("TABLE")
        columns = self.columns()
        self.expect("USING")
        path = self.expect_type(TokenType.STRING, "'module:Class' after USING")
        self.done()
        return CreateTableFunction(name, params, columns, path.text, loc, at)

    def _derived(self) -> bool:
        """Whether a CREATE STREAM continues with AS (derived) rather than a column list."""
        depth = 0
        for tok in self.tokens[self.pos :]:
            if tok.token_type is TokenType.L_PAREN:
                depth += 1
            elif tok.token_type is TokenType.R_PAREN:
                depth -= 1
            elif depth == 0 and tok.text.upper() == "AS":
                return True
        return False

    def columns(self) -> tuple[ColumnDef, ...]:
        self.expect("(")
        cols: list[ColumnDef] = []
        while True:
            name_tok = self.name("a column name")
            type_toks: list[Token] = []
            depth = 0
            while True:
                tok = self.peek()
                if tok is None:
                    self.fail_at_end("the column list is not closed with ')'")
                assert tok is not None
                if depth == 0 and tok.token_type in (TokenType.COMMA, TokenType.R_PAREN):
                    break
                if tok.token_type in (TokenType.L_PAREN, TokenType.LT):
                    depth += 1
                elif tok.token_type in (TokenType.R_PAREN, TokenType.GT):
                    depth -= 1
                type_toks.append(self.next())
            if not type_toks:
                self.fail(f"expected a type for column {name_tok.text!r}", self.peek())
            type_sql = self.text[type_toks[0].start : type_toks[-1].end + 1]
            loc = _span(self.text, name_tok, type_toks[-1])
            cols.append(ColumnDef(name_tok.text, type_sql, loc))
            if self.next().token_type is TokenType.R_PAREN:
                return tuple(cols)

    def options(self) -> Options:
        """``(key = 'value', ...)``: each value with where it and its assignment are."""
        self.expect("(")
        opts = Options()
        if self.peek() is not None and self.peek().token_type is TokenType.R_PAREN:  # type: ignore[union-attr]
            self.next()
            return opts
        while True:
            key = self.name("an option name")
            self.expect_type(TokenType.EQ, f"'=' after option {key.text!r}")
            value = self.next()
            if value.token_type in (TokenType.COMMA, TokenType.R_PAREN):
                self.fail(f"expected a value for option {key.text!r}", value)
            name = key.text.lower()
            opts[name] = value.text
            quoted = self.text[value.start] in "'\"" and value.end > value.start
            opts.value_spans[name] = (Location.of_span(self.text, value.start + 1, value.end)
                                      if quoted else _span(self.text, value))
            opts.assignment_spans[name] = _span(self.text, key, value)
            end = self.next()
            if end.token_type is TokenType.R_PAREN:
                return opts
            if end.token_type is not TokenType.COMMA:
                self.fail("expected ',' or ')' in the option list", end)

    def drop(self) -> Statement:
        first = self.next()
        kind = self.expect("QUERY", "STREAM", "TABLE", "AGGREGATE", "LIBRARY", "FUNCTION")
        if self.accept("IF"):
            self.expect("EXISTS")
        name_tok = self.name(f"the name of the {kind.text.lower()} to drop")
        self.done()
        return Drop(ObjectKind(kind.text.upper()), name_tok.text, _span(self.text, first, name_tok))

    def explain(self) -> Statement:
        self.next()
        if self.accept("ANALYZE") is not None:
            self.done()
            return Explain(None, glob=True, analyze=True)
        glob = self.accept("GLOBAL") is not None
        if glob and self.accept("DOT") is not None:
            self.done()
            return Explain(None, glob, fmt=ExplainFormat.DOT)
        if self.peek() is None:
            return Explain(None, glob)
        if self.word() in ("SELECT", "(") or self.word() in _FORM_WORDS:
            return Explain(None, glob, self.select())
        if not glob and self.accept("LANGUAGE"):
            return Explain(None, glob, self.language(keyword_as=False))
        name_tok = self.name("a query name or a SELECT")
        self.done()
        return Explain(name_tok.text, glob)

    def language(self, keyword_as: bool = True) -> SelectText | ApasText:
        """``LANGUAGE apas AS '<query>'`` (or ``LANGUAGE sql AS SELECT ...``); after EXPLAIN
        without the ``AS``.
        """
        lang = self.name("a query language: apas or sql")
        if lang.text.lower() == "sql":
            if keyword_as:
                self.expect("AS")
            return self.select()
        if lang.text.lower() != "apas":
            self.fail(f"unknown query language {lang.text!r}; use apas or sql", lang)
        if keyword_as:
            self.expect("AS")
        tok = self.expect_type(TokenType.STRING, "the query text as a string, AS '...'")
        self.done()
        positions = unquote_positions(self.text, tok.start, tok.end + 1, tok.text)
        return ApasText(parse_program(tok.text, self.text, positions))

    # -- SELECT with window clauses ------------------------------------------------------
    def select(self) -> SelectText:
        form = OutputForm.INTERVALS
        if self.word() in _FORM_WORDS:
            form = _FORM_WORDS[self.next().text.upper()]
        if self.peek() is None:
            self.fail_at_end("expected a SELECT")
        tokens = self.tokens[self.pos :]
        self.pos = len(self.tokens)
        return cut_windows_and_parse(self.text, tokens, form)


def cut_windows_and_parse(text: str, tokens: list[Token], form: OutputForm) -> SelectText:
    """Blank out window clauses in the SELECT's text, parse it, and remember the windows."""
    start, end = tokens[0].start, tokens[-1].end + 1
    chars = list(text[start:end])
    windows: dict[int, SourceWindow] = {}

    def blank(a: int, b: int) -> None:
        for i in range(a - start, b - start):
            if chars[i] != "\n":
                chars[i] = " "

    calls: dict[str, SourceWindow] = {}
    functions: dict[int, TableFunctionCall] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        prev = tokens[i - 1] if i else None
        if (prev is not None and prev.token_type in _FROM_ITEM_LEADS
                and is_user_table_function(tokens, i)):
            call = read_user_table_function(
                text, tokens, i, lambda toks, end: _WindowParser(text, toks, end).parse())
            after = tokens[call.last + 1] if call.last + 1 < len(tokens) else None
            aliased = after is not None and after.token_type in (TokenType.ALIAS, TokenType.VAR)
            written = call.stream.text + ("" if aliased else f" AS {tok.text}")
            blank(tok.start, tokens[call.last].end + 1)
            chars[tok.start - start: tok.start - start + len(written)] = list(written)
            name_end = tok.start - start + len(call.stream.text) - 1
            functions[name_end] = call.call
            if call.window is not None:
                windows[name_end] = SourceWindow(call.window[0], name_end, call.window[1])
            i = call.last + 1
            continue
        if prev is not None and prev.token_type in _FROM_ITEM_LEADS and is_table_function(
                tokens, i):
            found = read_table_function(text, tokens, i)
            assert found.stream is not None
            close_tok = tokens[found.last]
            blank(tok.start, close_tok.end + 1)
            for j, ch in enumerate(found.stream.text):
                chars[tok.start - start + j] = ch
            name_end = tok.start - start + len(found.stream.text) - 1
            windows[name_end] = SourceWindow(found.window, name_end, found.loc)
            i = found.last + 1
            continue
        if (tok.token_type is TokenType.FOR and prev is not None
                and [t.text.upper() for t in tokens[i + 1:i + 4]] == ["SYSTEM_TIME", "AS", "OF"]):
            last = i + 4
            while (last + 2 < len(tokens) and tokens[last + 1].token_type is TokenType.DOT):
                last += 2
            if last >= len(tokens):
                msg = "expected the stream's event-time column after FOR SYSTEM_TIME AS OF"
                raise QuerySyntaxError(msg, text, _span(text, tok, tokens[-1]))
            path = tuple(t.text for t in tokens[i + 4:last + 1:2])
            blank(tok.start, tokens[last].end + 1)
            windows[prev.end - start] = SourceWindow(LookupTime(path), prev.end - start,
                                                     _span(text, tok, tokens[last]))
            i = last + 1
            continue
        refuse_window_call(text, tokens, i)
        if is_window_call(tokens, i):
            found = read_window_call(text, tokens, i)
            close_tok = tokens[found.last]
            column = window_call_column(tok.start - start, close_tok.end + 1 - tok.start)
            chars[tok.start - start: close_tok.end + 1 - start] = list(column)
            calls[column.lower()] = SourceWindow(found.window, -1, found.loc)
            i = found.last + 1
            continue
        if (
            tok.token_type is TokenType.L_BRACKET
            and prev is not None
            and i + 1 < len(tokens)
            and _norm(tokens[i + 1].text) in _WINDOW_WORDS
        ):
            close = _matching_bracket(text, tokens, i)
            spec = _WindowParser(text, tokens[i + 1 : close], tokens[close]).parse()
            loc = _span(text, tok, tokens[close])
            windows[prev.end - start] = SourceWindow(spec, prev.end - start, loc)
            blank(tok.start, tokens[close].end + 1)
            i = close + 1
            continue
        if (
            tok.text.upper() == "STREAM"
            and prev is not None
            and prev.token_type in _FROM_ITEM_LEADS
            and _is_stream_call(tokens, i)
        ):
            length = _stream_call_length(tokens, i)
            name_tok, spec_tok, close_tok = tokens[i + 2], tokens[i + 4], tokens[i + length - 1]
            spec_tokens = _tokenize(spec_tok.text, spec_tok.start)
            spec = _WindowParser(spec_tok.text, spec_tokens, None).parse(outer=(text, spec_tok))
            if length == 8:
                _ensure_capture_mode(text, tokens[i + 6])
            blank(tok.start, close_tok.end + 1)
            for j, ch in enumerate(name_tok.text):
                chars[tok.start - start + j] = ch
            name_end = tok.start - start + len(name_tok.text) - 1
            windows[name_end] = SourceWindow(spec, name_end, _span(text, tok, close_tok))
            i += length
            continue
        i += 1
    select_text = "".join(chars)
    try:
        parsed = sqlglot.parse_one(select_text, read="spark")
    except ParseError as e:
        raise _syntax_error(text, select_text, start, e) from None
    except TokenError as e:
        msg = f"cannot read the query text: {e}"
        raise QuerySyntaxError(msg, text, Location.of_span(text, start, end)) from None
    if not isinstance(parsed, exp.Select | exp.SetOperation):
        msg = f"expected a SELECT query, found {parsed.key.upper()}"
        raise QuerySyntaxError(msg, text, Location.of_span(text, start, end))
    return SelectText(select_text, parsed, form, windows, start, calls, functions)


def _norm(word: str) -> str:
    """Upper-case a token's text and collapse inner blanks ('PARTITION  BY' is one token)."""
    return " ".join(word.split()).upper()


def _is_stream_call(tokens: list[Token], i: int) -> bool:
    return _stream_call_length(tokens, i) > 0


def _stream_call_length(tokens: list[Token], i: int) -> int:
    """How many tokens ``STREAM(name, 'spec' [, 'mode'])`` at ``i`` spans (0: not one)."""
    kinds = [t.token_type for t in tokens[i + 1 : i + 8]]
    head = [TokenType.L_PAREN, kinds[1] if len(kinds) > 1 else None, TokenType.COMMA,
            TokenType.STRING]
    if kinds[:4] != head:
        return 0
    if kinds[4:5] == [TokenType.R_PAREN]:
        return 6
    if kinds[4:7] == [TokenType.COMMA, TokenType.STRING, TokenType.R_PAREN]:
        return 8
    return 0


_CAPTURE_MODES = ("BLOCK",)


def _ensure_capture_mode(text: str, tok: Token) -> None:
    """The third argument of ``STREAM(s, 'CUT ...', 'BLOCK')``: a re-scan of the chunk in
    the same cycle returns the buffered chunk, which is what every scan of a cycle does
    here (a cycle reads a stream's input once and caches it), so BLOCK is accepted as is.
    """
    if tok.text.strip().upper() not in _CAPTURE_MODES:
        msg = (f"unknown capture mode {tok.text!r} in STREAM(...); expected "
               f"{' or '.join(repr(m) for m in _CAPTURE_MODES)}")
        raise QuerySyntaxError(msg, text, _span(text, tok))


def _matching_bracket(text: str, tokens: list[Token], i: int) -> int:
    close = matching_paren(tokens, i, TokenType.L_BRACKET, TokenType.R_BRACKET)
    if close is None:
        msg = "window clause is not closed with ']'"
        raise QuerySyntaxError(msg, text, _span(text, tokens[i]))
    return close


def _syntax_error(text: str, select_text: str, offset: int, e: ParseError) -> QuerySyntaxError:
    info = e.errors[0] if e.errors else {}
    line, col = info.get("line") or 1, info.get("col") or 1
    highlight = info.get("highlight") or ""
    lines = select_text.split("\n")
    line_start = sum(len(x) + 1 for x in lines[: line - 1])
    end = line_start + col
    start_at = max(line_start, end - max(1, len(highlight)))
    description = str(info.get("description") or e).split(". Line")[0]
    description = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),.*?>", r"'\1'", description)
    msg = f"syntax error: {description}"
    return QuerySyntaxError(msg, text, Location.of_span(text, offset + start_at, offset + end))


@dataclass
class _WindowParser:
    """Reads the tokens between ``[`` and ``]`` (or inside a STREAM() spec string)."""

    text: str
    tokens: list[Token]
    close: Token | None
    pos: int = 0
    outer: tuple[str, Token] | None = None

    def parse(self, outer: tuple[str, Token] | None = None) -> WindowSpec:
        self.outer = outer
        if not self.tokens:
            self.fail("empty window clause; expected RANGE, ROWS, NOW, UNBOUNDED, CUT or SESSION")
        head = self.next_word()
        spec: WindowSpec
        if head == "RANGE":
            if self.word() == "UNBOUNDED":
                self.pos += 1
                spec = UnboundedWindow()
            else:
                size = self.duration("RANGE")
                slide = self.duration("SLIDE") if self.accept("SLIDE") else None
                spec = RangeWindow(size, slide)
        elif head == "NOW":
            spec = NowWindow()
        elif head == "UNBOUNDED":
            spec = UnboundedWindow()
        elif head == "ROWS":
            spec = RowsWindow(self.count("ROWS"))
        elif head in ("PARTITION", "PARTITION BY"):
            if head == "PARTITION":
                self.expect("BY")
            cols = [self.next_token("a partition column").text]
            while self.accept(","):
                cols.append(self.next_token("a partition column").text)
            if self.accept("SESSION"):
                spec = SessionWindow(self.duration("SESSION"), tuple(cols))
            else:
                self.expect("ROWS", "SESSION")
                spec = RowsWindow(self.count("ROWS"), tuple(cols))
        elif head == "CUT":
            spec = self.cut()
        elif head == "SESSION":
            spec = SessionWindow(self.duration("SESSION"))
        else:
            self.fail(f"unknown window {head!r}; expected RANGE, ROWS, NOW, UNBOUNDED, CUT "
                      "or SESSION")
        if self.pos < len(self.tokens):
            self.fail(f"unexpected {self.tokens[self.pos].text!r} in window clause")
        return spec

    def cut(self) -> WindowSpec:
        """After CUT: ``EVERY n ROWS`` or ``BY n ROWS`` (count), ``[ON t] BY d`` (time) or
        ``ON k [, k2 ...]`` (key), each with an optional ``WINDOW m CHUNKS``.
        """
        spec: WindowSpec
        if self.accept("EVERY"):
            rows = self.count("CUT EVERY")
            self.expect("ROWS", "ROW")
            spec = CountCutWindow(rows)
        elif self.accept("ON"):
            cols = [self.next_token("a column after CUT ON").text]
            while self.accept(","):
                cols.append(self.next_token("a column after ','").text)
            if self.accept("BY"):
                if len(cols) > 1:
                    self.fail("CUT ON t BY d cuts on one time column; "
                              "for a cut by key leave out BY")
                by = self.duration("CUT ON ... BY")
                spec = CutWindow(by, cols[0])
            else:
                spec = KeyCutWindow(tuple(cols))
        else:
            self.expect("BY", "EVERY", "ON")
            amount = self.count("CUT BY")
            if self.accept("ROWS") or self.accept("ROW"):
                spec = CountCutWindow(amount)
            elif self.word() in DURATION_UNITS:
                spec = CutWindow(Duration(amount, self.next_token("a unit").text.upper()))
            else:
                spec = CutWindow(Duration(amount))
        if self.accept("WINDOW"):
            chunks = self.count("WINDOW")
            self.expect("CHUNKS", "CHUNK")
            spec = replace(spec, chunks=chunks)
        return spec

    def word(self) -> str:
        return self.tokens[self.pos].text.upper() if self.pos < len(self.tokens) else ""

    def accept(self, word: str) -> bool:
        if self.word() == word:
            self.pos += 1
            return True
        return False

    def expect(self, *words: str) -> None:
        if self.word() not in words:
            found = self.tokens[self.pos].text if self.pos < len(self.tokens) else "the end"
            self.fail(f"expected {' or '.join(words)} in window clause, found {found!r}")
        self.pos += 1

    def next_token(self, what: str) -> Token:
        if self.pos >= len(self.tokens):
            self.fail(f"expected {what} in window clause")
        self.pos += 1
        return self.tokens[self.pos - 1]

    def next_word(self) -> str:
        return _norm(self.next_token("a window kind").text)

    def count(self, after: str) -> int:
        tok = self.next_token(f"a number after {after}")
        if tok.token_type is not TokenType.NUMBER or not tok.text.isdigit() or int(tok.text) <= 0:
            self.pos -= 1
            self.fail(f"expected a positive whole number after {after}, found {tok.text!r}")
        return int(tok.text)

    def duration(self, after: str) -> Duration:
        amount = self.count(after)
        if self.word() in DURATION_UNITS:
            return Duration(amount, self.next_token("a unit").text.upper())
        return Duration(amount)

    def fail(self, message: str) -> NoReturn:
        if self.outer is not None:
            text, tok = self.outer
            raise QuerySyntaxError(message, text, _span(text, tok))
        if self.pos < len(self.tokens):
            loc = _span(self.text, self.tokens[self.pos])
        elif self.close is not None:
            loc = _span(self.text, self.close)
        else:
            loc = Location.of_span(self.text, 0, len(self.text))
        raise QuerySyntaxError(message, self.text, loc)
