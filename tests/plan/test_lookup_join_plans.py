"""Lookup joins bind the stream as a stream (each event joined once, at its time), and
refuse what they cannot mean, with what to write. No JVM: schemas only."""

from __future__ import annotations

import pytest

from sparkcq.errors import AnalysisError
from sparkcq.language.sql.parser import parse_statement
from sparkcq.plan.binder import bind_select
from sparkcq.plan.nodes import EdgeKind, Join, Window, walk
from sparkcq.plan.typer import SchemaTyper


def bound(query: str, catalog):
    text = f"CREATE QUERY q AS {query}"
    stmt = parse_statement(text)
    return text, stmt, lambda: bind_select(stmt.select, text, catalog, None, trusted=True,
                                           typer=SchemaTyper()).plan


def test_the_stream_of_a_lookup_join_stays_a_stream(catalog):
    _, _, bind = bound("SELECT s.k, h.g FROM s JOIN h FOR SYSTEM_TIME AS OF s.t ON s.k = h.k",
                       catalog)
    plan = bind()
    assert plan.kind is EdgeKind.STREAM
    (join,) = [n for n in walk(plan) if isinstance(n, Join)]
    assert not [n for n in walk(plan) if isinstance(n, Window)]  # no [UNBOUNDED]
    assert {c.kind for c in join.children} == {EdgeKind.STREAM, EdgeKind.TABLE}
    # without FOR SYSTEM_TIME AS OF the stream is [UNBOUNDED]: a relation
    _, _, plain = bound("SELECT s.k, h.g FROM s JOIN h ON s.k = h.k", catalog)
    assert plain().kind is EdgeKind.RELATION


@pytest.mark.parametrize(("query", "message", "underlined"), [
    ("SELECT s.k FROM s AS c JOIN h FOR SYSTEM_TIME AS OF c.proc_time ON c.k = h.k",
     "write FOR SYSTEM_TIME AS OF c.t (processing time is not kept)",
     "FOR SYSTEM_TIME AS OF c.proc_time"),
    ("SELECT h.g, count(*) FROM s JOIN h FOR SYSTEM_TIME AS OF s.t ON s.k = h.k GROUP BY h.g",
     "aggregate it in a query over a derived stream", None),
    ("SELECT s.k FROM h JOIN s FOR SYSTEM_TIME AS OF s.t ON s.k = h.k",
     "'s' is a stream", "FOR SYSTEM_TIME AS OF s.t"),
], ids=["processing time", "aggregate", "on a stream"])
def test_what_a_lookup_join_refuses(catalog, query, message, underlined):
    text, _, bind = bound(query, catalog)
    with pytest.raises(AnalysisError) as err:
        bind()
    assert message in str(err.value)
    if underlined:
        assert text[err.value.loc.start:err.value.loc.end] == underlined
