"""The StreamAPAS parser: the published queries, trees, and errors with line and column.
No Spark here.
"""

import pytest

from sparkcq.errors import QuerySyntaxError
from sparkcq.language.apas import syntax as s
from sparkcq.language.apas.parser import parse_program, quote_query
from sparkcq.language.sql.parser import parse_statement
from sparkcq.language.sql.statements import ApasText, CreateQuery

TWO_SECTORS = """\
select o1[sektor = 1, avg = agg.avg($I.val), minmax = (agg.min($I.val) + agg.max($I.val)) / 2];
select o2[sektor = 2, avg = agg.avg($II.val), minmax = (agg.min($II.val) + agg.max($II.val)) / 2];
where util.union($o1[T], $o2[T]) select facts[$new[T]];
where $facts.avg > 70 select result[$facts[T]];
select [$result[T]]"""


def test_the_two_sector_query_parses_into_its_steps():
    program = parse_program(TWO_SECTORS)
    assert [st.name for st in program.steps] == ["o1", "o2", "facts", "result"]
    o1 = program.steps[0].tree.items
    assert [i.path for i in o1] == [("sektor",), ("avg",), ("minmax",)]
    minmax = o1[2].value
    assert isinstance(minmax, s.Binary) and minmax.op is s.Operator.DIV
    assert isinstance(minmax.left, s.Binary) and minmax.left.op is s.Operator.ADD
    low = minmax.left.left
    assert isinstance(low, s.Call) and low.shown() == "agg.min"
    assert TWO_SECTORS[low.span.start:low.span.end] == "agg.min($I.val)"
    assert low.args[0].source == "I" and low.args[0].path == ("val",)
    union = program.steps[2].where
    assert isinstance(union, s.Call) and union.shown() == "util.union"
    assert [a.ref.source for a in union.args] == ["o1", "o2"]
    assert program.final.name is None
    (out,) = program.final.tree.items
    assert isinstance(out, s.SubTree) and out.ref.source == "result" and out.ref.path == ()
    assert TWO_SECTORS[out.span.start:out.span.end] == "$result[T]"


@pytest.mark.parametrize("text", [
    "from o1[a = $I.val]; select [$o1[T]]",  # as published: the first step starts with from
    "select from o1[a = $I.val]; select [$o1[T]];",
    "SELECT o1[a = $I.val]; SELECT [$o1[T]]",  # keywords in any case
    "-- a comment\nwhere window.range($I, 1h) select o1[a = $I.val];\nselect [$o1[T]]",
], ids=["from", "select from", "upper case", "comment and window"])
def test_accepted_forms(text):
    program = parse_program(text)
    assert [st.name for st in program.steps] == ["o1"]


def test_trees_paths_subtrees_and_literals():
    text = (
        "select o[a.b = 1, d = [x = 2.5, y = $I.a], $I.c[T], $I[T], s = 'it\\'s', "
        "u = \"q\", f = not true xor false, w = -$I.v * 2]; select [$o[T]]")
    program = parse_program(text)
    items = program.steps[0].tree.items
    assert items[0].path == ("a", "b")
    d = items[1].value
    assert isinstance(d, s.Tree) and [i.path for i in d.items] == [("x",), ("y",)]
    assert d.items[0].value.kind is s.LiteralKind.DOUBLE and d.items[0].value.value == 2.5
    assert isinstance(items[2], s.SubTree) and items[2].ref.path == ("c",)
    assert text[items[2].span.start:items[2].span.end] == "$I.c[T]"
    assert items[3].ref.path == ()
    assert items[4].value.value == "it's" and items[5].value.value == "q"
    xor = items[6].value
    assert xor.op is s.Operator.XOR and xor.left.op is s.Operator.NOT
    neg = items[7].value
    assert neg.op is s.Operator.MUL and neg.left.op is s.Operator.NEG


def test_durations():
    program = parse_program("where window.range($I, 90s, 10min) select o[a = $I.v]; "
                            "select [$o[T]]")
    call = program.steps[0].where
    assert [a.value for a in call.args[1:]] == [(90, "s"), (10, "min")]


@pytest.mark.parametrize(("text", "message", "line", "col"), [
    ("select o1[a = ];", "expected one of", 1, 15),
    ("select o1[a = 1]\nselect [$o1[T]]", "expected ';', found 'select'", 2, 1),
    ("select o1[a = 1];\nselect [a = 1 # 2]", "unexpected character '#'", 2, 15),
    ("select o1[a = 1];", "found the end of the query", 1, 18),
    ("select [$o1[X]]", "expected 'T'", 1, 13),
], ids=["missing value", "missing semicolon", "bad character", "no output", "subtree T"])
def test_syntax_errors_point_at_line_and_column(text, message, line, col):
    with pytest.raises(QuerySyntaxError) as err:
        parse_program(text)
    assert message in str(err.value)
    assert (err.value.loc.line, err.value.loc.col) == (line, col)


def test_create_query_language_apas_points_into_the_statement():
    statement = f"CREATE QUERY q LANGUAGE apas AS {quote_query(TWO_SECTORS)}"
    stmt = parse_statement(statement)
    assert isinstance(stmt, CreateQuery) and isinstance(stmt.select, ApasText)
    o1 = stmt.select.program.steps[0]
    # the spans are offsets into the statement, past the opening quote
    assert statement[o1.name_span.start:o1.name_span.end] == "o1"
    bad = TWO_SECTORS.replace("$facts.avg > 70", "$facts.avg > > 70")
    with pytest.raises(QuerySyntaxError) as err:
        parse_statement(f"CREATE QUERY q LANGUAGE apas AS {quote_query(bad)}")
    assert (err.value.loc.line, err.value.loc.col) == (4, 20)
    assert "where $facts.avg > > 70" in str(err.value)


def test_quoted_query_with_quotes_keeps_its_positions():
    code = "select o[a = 'x\\'y' + $I.s, b = $I.v];\nselect [$o[T]]"
    statement = f"CREATE QUERY q LANGUAGE apas AS {quote_query(code)}"
    program = parse_statement(statement).select.program
    b = program.steps[0].tree.items[1]
    assert statement[b.span.start:b.span.end] == "b = $I.v"
    assert program.steps[0].tree.items[0].value.left.value == "x'y"


def test_unknown_language_is_refused_at_its_name():
    with pytest.raises(QuerySyntaxError) as err:
        parse_statement("CREATE QUERY q LANGUAGE cql AS 'x'")
    assert "unknown query language 'cql'; use apas or sql" in str(err.value)
    assert err.value.loc.col == 25
