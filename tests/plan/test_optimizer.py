"""Golden plans of the optimizer's rules: ``tests/fixtures/optimizer/<rule>.txt``.

Each case is a query and its plan once that one rule ran on the bound plan (as sqlglot's
``check_file`` runs one rule on a parsed query); ``SPARKCQ_GOLDEN=write`` rewrites the files
from what the rules produce now (review the diff). Binding types the expressions from the
schemas alone (``SchemaTyper``): no JVM runs.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkcq.catalog import Catalog
from sparkcq.language.sql.parser import parse_script_located
from sparkcq.language.sql.statements import Explain
from sparkcq.plan.binder import bind_select
from sparkcq.plan.nodes import render_tree
from sparkcq.plan.rules import RULES, Rule
from sparkcq.plan.rules.join_aligned_chunks import join_aligned_chunks
from sparkcq.plan.rules.slice_window_aggregates import slice_window_aggregates
from sparkcq.plan.typer import SchemaTyper

FIXTURES = Path(__file__).parent.parent / "fixtures" / "optimizer"


def read_cases(path: Path) -> tuple[list[str], list[tuple[str, str]]]:
    """The header comment lines and the (query, expected plan) cases of a golden file."""
    header, cases, query, plan = [], [], None, []
    for line in path.read_text().splitlines():
        if line.startswith("== "):
            if query is not None:
                cases.append((query, "\n".join(plan).strip()))
            query, plan = line[3:], []
        elif query is None:
            header.append(line)
        elif not line.startswith("#"):
            plan.append(line)
    if query is not None:
        cases.append((query, "\n".join(plan).strip()))
    return header, cases


#: the rules a rule reads the output of, run before it in its golden cases
PREREQUISITES: dict[str, tuple[Rule, ...]] = {
    "join_aligned_chunks": (slice_window_aggregates,),
    "evaluate_at_slides": (slice_window_aggregates, join_aligned_chunks),
}


def after_rule(rule: Rule, query: str, catalog: Catalog) -> str:
    """The plan of ``query`` once ``rule`` alone ran on it (after the rules whose output
    it reads, ``PREREQUISITES``), as EXPLAIN draws it.
    """
    text = f"EXPLAIN {query}"
    ((stmt, _loc),) = parse_script_located(text)
    assert isinstance(stmt, Explain) and stmt.select is not None
    plan = bind_select(stmt.select, text, catalog, None, trusted=True, typer=SchemaTyper()).plan
    for before in PREREQUISITES.get(rule.__name__, ()):
        plan = before(plan, running=())
    return render_tree(rule(plan, running=())).strip()


@pytest.mark.parametrize("rule", RULES, ids=[r.__name__ for r in RULES])
def test_rule_golden_plans(catalog, rule):
    path = FIXTURES / f"{rule.__name__}.txt"
    _header, cases = read_cases(path)
    assert cases, f"{path} holds no case"
    got = {query: after_rule(rule, query, catalog) for query, _ in cases}
    if os.environ.get("SPARKCQ_GOLDEN") == "write":
        text = path.read_text()
        for query, expected in cases:
            text = text.replace(f"== {query}\n{expected}", f"== {query}\n{got[query]}")
        path.write_text(text)
    for query, expected in cases:
        assert got[query] == expected, f"{rule.__name__}: {query}"
