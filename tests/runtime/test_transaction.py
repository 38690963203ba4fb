"""A cycle's rollback restores what the cycle changed: a cycle rebinds no driver-side
attribute of an operator or its helpers but its ``progress`` record.

The rollback puts back each participant's progress record and frame states whole
(``runtime/transaction.py``); an attribute a new operator changed per cycle outside its
record would survive a failed cycle. These tests run one query of each operator kind for a
few cycles and compare every participant's attributes before and after each cycle.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkcq import Engine
from sparkcq.runtime.transaction import CycleParticipant, CycleTransaction

_QUERIES = {
    "tumbling": "SELECT k, sum(v) AS s, count(*) AS n FROM s [RANGE 10 SLIDE 10] GROUP BY k",
    "sliding": "SELECT k, avg(v) AS a FROM s [RANGE 6 SLIDE 2] GROUP BY k",
    "range": "SELECT k, max(v) AS m FROM s [RANGE 5] GROUP BY k",
    "rows": "SELECT k, sum(v) AS s FROM s [PARTITION BY k ROWS 2] GROUP BY k",
    "istream": "ISTREAM SELECT k, count(*) AS n FROM s [RANGE 5] GROUP BY k",
    "rstream": "RSTREAM SELECT k, count(*) AS n FROM s [RANGE 4 SLIDE 2] GROUP BY k",
    "join": "SELECT a.k, a.v, b.v AS w FROM s [ROWS 3] a, s2 [ROWS 3] b WHERE a.k = b.k",
    "interval join": ("SELECT a.k, a.v, b.v AS w FROM s [RANGE 3] a, s2 [RANGE 3] b "
                      "WHERE a.k = b.k"),
    "union": "SELECT k, v FROM s UNION ALL SELECT k, v FROM s2",
    "user aggregate": "SELECT k, umax(v) AS r FROM s [RANGE 5] GROUP BY k",
    # its table is replaced before the third cycle, which switches to the new rows
    "table join": "SELECT s.k, s.v, h.r FROM s [RANGE 5] JOIN h ON s.k = h.k",
}


def _fields(obj: object) -> dict[str, Any]:
    return dict(vars(obj))


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "one operator per query"])
@pytest.mark.parametrize("name", list(_QUERIES))
def test_a_cycle_changes_only_progress_records(spark, monkeypatch, name, fuse):
    eng = Engine(spark=spark, fuse=fuse, allow_udf_modules=["udas"])
    eng.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    eng.execute("CREATE STREAM s2 (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    eng.execute("CREATE AGGREGATE umax(v DOUBLE) RETURNS DOUBLE USING 'udas:UMax'")
    eng.register_table("h", [{"k": "a", "r": "north"}, {"k": "b", "r": "south"}])
    eng.execute(f"CREATE QUERY q AS {_QUERIES[name]}")
    seen: list[tuple[CycleParticipant, dict[str, Any]]] = []
    begin = CycleTransaction.begin.__func__  # type: ignore[attr-defined]

    def recording_begin(cls, rt, participants):  # noqa: ANN001, ANN202
        tx = begin(cls, rt, participants)
        seen[:] = [(obj, _fields(obj)) for obj, _progress in tx.before.progress]
        return tx

    monkeypatch.setattr(CycleTransaction, "begin", classmethod(recording_begin))
    undeclared: dict[str, set[str]] = {}
    for cycle in range(4):
        rows = [{"k": "a", "v": float(cycle), "t": 3 * cycle},
                {"k": "b", "v": 2.0 * cycle, "t": 3 * cycle + 1}]
        eng.push("s", rows, watermark=3 * cycle)
        eng.push("s2", rows, watermark=3 * cycle)
        if cycle == 2:
            eng.load_table("h", [{"k": "a", "r": "east"}])
        eng.run_cycle()
        assert seen, "the cycle began no transaction"
        for obj, before in seen:
            after = _fields(obj)
            changed = {k for k in after.keys() | before.keys()
                       if after.get(k, before) is not before.get(k, after)}
            missing = changed - {"progress"}
            if missing:
                undeclared.setdefault(type(obj).__name__, set()).update(missing)
    assert not undeclared, f"attributes a cycle changes outside progress: {undeclared}"
    assert not any("failed" in line for line in eng.query_log("q")), eng.query_log("q")
    assert not eng.results("q").empty
