"""Golden plans of the optimizer's rules: ``tests/fixtures/optimizer/<rule>.txt``.

Each case is a query and the plan EXPLAIN shows once the rules ran; ``SPARKCQ_GOLDEN=write``
rewrites the files from what the rules produce now (review the diff).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparkcq.plan.rules import RULES

FIXTURES = Path(__file__).parent / "fixtures" / "optimizer"


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


@pytest.fixture(scope="module")
def planner(spark):
    from sparkcq import Engine

    eng = Engine(spark)
    eng.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    eng.execute("CREATE STREAM s2 (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    return eng


@pytest.mark.parametrize("rule", [r.__name__ for r in RULES])
def test_rule_golden_plans(planner, rule):
    path = FIXTURES / f"{rule}.txt"
    _header, cases = read_cases(path)
    assert cases, f"{path} holds no case"
    got = {query: planner.execute(f"EXPLAIN {query}").strip() for query, _ in cases}
    if os.environ.get("SPARKCQ_GOLDEN") == "write":
        text = path.read_text()
        for query, expected in cases:
            text = text.replace(f"== {query}\n{expected}", f"== {query}\n{got[query]}")
        path.write_text(text)
    for query, expected in cases:
        assert got[query] == expected, f"{rule}: {query}"
