"""EXPLAIN in the user's words: the columns the binder names (``_g0``, ``_a0``, ``_x0``)
shown as what they stand for, on plans bound from the schemas alone (no JVM)."""

from __future__ import annotations

import pytest

from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import Explain
from sparkcq.plan.binder import bind_select
from sparkcq.plan.labels import user_labels
from sparkcq.plan.nodes import PlanNode, render_tree
from sparkcq.plan.rules import optimize
from sparkcq.plan.typer import SchemaTyper

CASES = {
    "sliding average": (
        "RSTREAM SELECT k, avg(v) AS a FROM s [RANGE 60 SLIDE 10] GROUP BY k",
        """
RSTREAM every 10  [stream]
  Project k, a  [relation]
    SlicedAggregate avg(v) AS a BY k <- Window [RANGE 60 SLIDE 10]  [relation]
      StreamScan s  [stream]
"""),
    "a call only HAVING reads, a filter before the aggregate": (
        "SELECT k, avg(v) AS a FROM s [RANGE 6 SLIDE 2] WHERE v > 0.5 GROUP BY k "
        "HAVING count(*) > 2",
        "Project k, a  [relation]\n"
        "  Filter COUNT(*) > 2  [relation]\n"
        "    SlicedAggregate avg(v) AS a, count(*) BY k <- Filter v > 0.5 "
        "<- Window [RANGE 6 SLIDE 2]  [relation]\n"
        "      StreamScan s  [stream]"),
    "an expression over two calls and a computed key": (
        "SELECT upper(k) AS u, sum(v) / count(*) AS r FROM s [RANGE 10 SLIDE 5] "
        "GROUP BY upper(k)",
        """
Project UPPER(k) AS u, SUM(v) / COUNT(*) AS r  [relation]
  SlicedAggregate sum(v), count(*) BY UPPER(k) <- Window [RANGE 10 SLIDE 5]  [relation]
    StreamScan s  [stream]
"""),
    "an aggregate over its own projection": (
        "SELECT k, max(v + 1) AS m, count(DISTINCT v) AS d FROM s [RANGE 10] GROUP BY k",
        """
Project k, m, d  [relation]
  Aggregate max(v + 1) AS m, count(DISTINCT v) AS d BY k (general: from +1/-1 changes; a \
user aggregate or DISTINCT is not computed from panes or per slide)  [relation]
    Project k, v + 1, v  [relation]
      Window [RANGE 10]  [relation]
        StreamScan s  [stream]
"""),
    "the path each operator takes, and why": (
        "SELECT c.k, c.n FROM (SELECT k, count(*) AS n FROM s [RANGE 10 SLIDE 5] GROUP BY k) "
        "AS c JOIN (SELECT max(n) AS top FROM (SELECT k, count(*) AS n FROM s [RANGE 10 SLIDE "
        "5] GROUP BY k)) AS m ON c.n = m.top JOIN s2 [ROWS 2] AS b ON c.k = b.k",
        """
Project `_0__k` AS k, `_0__n` AS n  [relation]
  Join ON c.k = b.k (general: from +1/-1 changes; its inputs are not two time-windowed \
streams, a stream's chunks with their aggregate, nor relations that change only at the \
same slides)  [relation]
    AlignedJoin ON c.n = m.top at each 5 (its inputs change only there: each pair of \
snapshots joined once, no state)  [relation]
      Project `k` AS _0__k, `n` AS _0__n  [relation]
        Project k, n  [relation]
          SlicedAggregate count(*) AS n BY k <- Window [RANGE 10 SLIDE 5]  [relation]
            StreamScan s  [stream]
      Project `top` AS _1__top  [relation]
        Project top  [relation]
          AlignedAggregate max(n) AS top at each 5 (its input changes only there: each \
snapshot aggregated once, no state)  [relation]
            Project n  [relation]
              Project k, n  [relation]
                SlicedAggregate count(*) AS n BY k <- Window [RANGE 10 SLIDE 5]  [relation]
                  StreamScan s  [stream]
    Project `k` AS _2__k, `v` AS _2__v, `t` AS _2__t  [relation]
      Window [ROWS 2]  [relation]
        StreamScan s2  [stream]
"""),
}


def planned(query: str, catalog) -> PlanNode:
    """The plan EXPLAIN draws for ``query``."""
    text = f"EXPLAIN {query}"
    ((stmt, _loc),) = parse_script_located(text)
    assert isinstance(stmt, Explain) and stmt.select is not None
    return optimize(bind_select(stmt.select, text, catalog, None, trusted=True,
                                typer=SchemaTyper()).plan, running=())


def explained(query: str, catalog) -> str:
    """What EXPLAIN prints for ``query``."""
    plan = planned(query, catalog)
    return render_tree(plan, labels=user_labels([plan]))


@pytest.mark.parametrize(("query", "want"), list(CASES.values()), ids=list(CASES))
def test_explain_shows_what_the_user_wrote(catalog, query, want):
    assert explained(query, catalog) == want.strip("\n")


def test_two_queries_that_name_one_result_differently_keep_its_own_name(catalog):
    plans = [planned(f"SELECT k, avg(v) AS {alias} FROM s [RANGE 60 SLIDE 10] GROUP BY k",
                     catalog) for alias in ("a", "b")]
    labels = user_labels(plans)
    aggregate = plans[0].children[0]
    assert aggregate == plans[1].children[0]  # one shared node
    assert labels[aggregate].startswith("SlicedAggregate avg(v) BY k")
    assert [labels[p] for p in plans] == ["Project k, avg(v) AS a", "Project k, avg(v) AS b"]
