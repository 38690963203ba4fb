"""Checkpoints written in the background (``Recovery``): the state is taken between two
cycles and written while the next ones run, so the frames it reads must outlive the cycles
that replace them; the events a stream holds beyond its watermark are named by the cycle
that took them and read again from the input log, not written.
"""

from __future__ import annotations

import json
import os

from sparkcq import Engine
from sparkcq.testing import CollectingSink

# the watermark trails the latest event time by 4 units: events wait for it
STREAM = ("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
          "WITH (event_time='t', lateness='4');")
# each event once, when the watermark passes the end of its chunk of 10 units (the chunk
# join reads the stream's edge: events ahead of the watermark wait in the scan)
ROWS = STREAM + ("CREATE TABLE names (k STRING, name STRING);"
                 "CREATE QUERY passed INTO collect AS SELECT S.k, S.v "
                 "FROM s [CUT ON t BY 10] S, names h WHERE h.k = S.k;")
TOTALS = STREAM + ("CREATE QUERY totals INTO collect AS SELECT k, count(*) AS n, "
                   "sum(v) AS total FROM s [RANGE 10] GROUP BY k;")


def rows(cycle: int) -> list[dict]:
    """Cycle ``cycle``'s input: three rows in its 5 units of event time, two keys."""
    return [{"k": "ab"[i % 2], "v": 10 * cycle + i, "t": 5 * cycle + i} for i in range(3)]


def values(*sinks: CollectingSink, query: str = "passed") -> list[int]:
    return sorted(int(v) for sink in sinks for _c, f in sink.cycles.get(query, [])
                  for v in f["v"])


def records(sink: CollectingSink, query: str) -> dict[int, list[tuple]]:
    """A query's records by cycle, each cycle's in a canonical order."""
    return {c: sorted(tuple(str(x) for x in r) for r in f.itertuples(index=False))
            for c, f in sink.cycles.get(query, [])}


def test_events_held_are_named_by_cycle_and_read_again_from_the_input_log(spark, tmp_path):
    """Events at or after the watermark wait in the stream's held batches. The checkpoint
    names the cycles that took them (and keeps those cycles' logged input), writing none
    of them; a restart reads them again from the log and delivers each once.
    """
    folder = str(tmp_path / "ck")
    sink1 = CollectingSink()
    first = Engine(spark=spark, checkpoint_dir=folder, sinks={"collect": sink1})
    first.execute(ROWS)
    first.load_table("names", [{"k": "a", "name": "alpha"}])
    first.push("s", [{"k": "a", "v": t, "t": t} for t in range(1, 6)])
    first.run_cycle()  # watermark 1
    first.push("s", [{"k": "a", "v": t, "t": t} for t in range(6, 9)])
    first.run_cycle()  # watermark 4: 4 and 5 of cycle 0 and 6 to 8 of cycle 1 wait
    first.wait_for_checkpoint()  # the crash comes after it is written
    assert values(sink1) == []  # the chunk [0, 10) is not complete
    state = os.path.join(folder, "state", "2")
    scans = [d for d in os.listdir(state)
             if os.path.exists(os.path.join(state, d, "held.json"))]
    assert len(scans) == 1
    with open(os.path.join(state, scans[0], "held.json")) as f:
        named = json.load(f)
    assert named["watermark"] == 4
    assert [e["cycle"] for e in named["batches"]] == [0, 1]
    with open(os.path.join(state, "frames.json")) as f:
        assert not any("held-events" in name for name in json.load(f))  # none written
    with open(os.path.join(state, "inputs.json")) as f:
        assert json.load(f) == {"s": [0, 1]}
    assert os.path.exists(os.path.join(folder, "offsets", "0.json"))  # kept for them

    sink2 = CollectingSink()
    second = Engine(spark=spark, checkpoint_dir=folder, sinks={"collect": sink2})
    assert second.cycle == 2  # nothing to redo
    # the batches read again hold just the events at or after the watermark (4)
    held = [r["t"] for b in second.scans["s"].progress.held
            for r in b.frame.select("t").collect()]
    assert sorted(held) == [4, 5, 6, 7, 8]
    second.end_input("s")
    second.run_until_idle()
    # 1 to 3 from the chunk's saved state, 4 to 8 from the input log
    assert values(sink2) == list(range(1, 9))


def test_the_input_of_a_cycle_no_event_of_is_held_is_dropped(spark, tmp_path):
    """Once the watermark passed every event of a cycle, the next checkpoint lets its
    logged input go."""
    folder = str(tmp_path / "ck")
    eng = Engine(spark=spark, checkpoint_dir=folder, sinks={"collect": CollectingSink()})
    eng.execute(ROWS)
    eng.load_table("names", [{"k": "a", "name": "alpha"}])
    for cycle in range(3):
        eng.push("s", rows(cycle))  # watermark 5 * cycle - 2: the cycle's rows wait
        eng.run_cycle()
        eng.wait_for_checkpoint()
    with open(os.path.join(folder, "state", "3", "inputs.json")) as f:
        assert json.load(f) == {"s": [2]}
    assert sorted(os.listdir(os.path.join(folder, "offsets"))) == ["2", "2.json"]


def test_a_state_taken_then_written_after_later_cycles_restores_as_it_was_taken(
        spark, tmp_path):
    """The cycles run between taking a state and writing it replace every frame it reads
    and free the old ones; the frames it reads are kept until it is written (and freed
    then), and a restore from it goes on exactly as the engine went on.
    """
    path = str(tmp_path / "state")
    sink = CollectingSink()
    eng = Engine(spark=spark, sinks={"collect": sink})
    eng.execute(TOTALS)
    for cycle in range(3):
        eng.push("s", rows(cycle), watermark=5 * cycle + 5)
        eng.run_cycle()
    staged = eng.stage_state(path)
    pinned = len(eng.rt.pins.pins)
    assert pinned > 0
    for cycle in range(3, 6):
        eng.push("s", rows(cycle), watermark=5 * cycle + 5)
        eng.run_cycle()
    assert eng.rt.pins.waiting  # replaced meanwhile: freed only once written
    staged.write()
    staged.done()
    assert not eng.rt.pins.pins and not eng.rt.pins.waiting

    restored_sink = CollectingSink()
    restored = Engine(spark=spark, sinks={"collect": restored_sink})
    restored.execute(TOTALS)
    restored.restore_state(path)
    assert restored.cycle == 3
    for cycle in range(3, 6):
        restored.push("s", rows(cycle), watermark=5 * cycle + 5)
        restored.run_cycle()
    went_on = {c: r for c, r in records(sink, "totals").items() if c >= 3}
    assert went_on and records(restored_sink, "totals") == went_on
    # the last cycle's totals: rows of t in [20, 30) per key, counted here
    last = [r for c in range(6) for r in rows(c) if 20 <= r["t"] < 30]
    for key in "ab":
        mine = [r["v"] for r in last if r["k"] == key]
        assert (key, str(len(mine)), str(sum(mine))) in {
            row[:3] for row in went_on[5]}, key
