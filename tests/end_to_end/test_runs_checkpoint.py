"""Checkpoints of state kept as runs (``runtime/state_runs.py``): a checkpoint writes the
runs made since the last one and names the others where earlier checkpoints saved them;
a restart reads them back from there, and a crash between a checkpoint's runs and its
switch to the latest loses and repeats nothing.

The job (tests/runs_crash_job.py) joins two streams over 30 units of event time, ten
a-rows and five b-rows per cycle of 10 units; the expected pairs are computed here from
its rows, not by another engine run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from runs_crash_job import CYCLES, QUERY, WINDOW, events
from served import short_lived_jvm

from sparkcq import Engine

JOB = Path(__file__).parent.parent / "runs_crash_job.py"
ROOT = Path(__file__).parent.parent.parent


def expected_pairs(cycles: int) -> set[tuple[int, int]]:
    """Every (a id, b id) of one key whose elements [t, t + WINDOW) overlap."""
    rows = [events(c) for c in range(cycles)]
    a = [r for pair in rows for r in pair[0]]
    b = [r for pair in rows for r in pair[1]]
    return {(x["id"], y["id"]) for x in a for y in b
            if x["k"] == y["k"] and abs(x["t"] - y["t"]) < WINDOW}


def committed_pairs(out: Path) -> list[tuple[int, int]]:
    """The pairs in the files sink's committed cycles, each file read once."""
    done = {name.removeprefix("cycle-") for name in os.listdir(out / "_committed-cycles")}
    pairs = []
    for name in sorted(os.listdir(out / "pairs")):
        stem = name.removeprefix("cycle-").removesuffix(".jsonl")
        if name.endswith(".jsonl") and stem in done:
            frame = pd.read_json(out / "pairs" / name, lines=True)
            pairs += list(zip(frame["ai"], frame["bi"], strict=True))
    return pairs


def run_job(folder: Path, out: Path, kill_at: int | None = None) -> str:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
           **short_lived_jvm()}
    args = [sys.executable, str(JOB), str(folder), str(out)]
    args += [str(kill_at)] if kill_at is not None else []
    done = subprocess.run(args, capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    return done.stdout


def test_a_checkpoint_writes_only_the_runs_made_since_the_last_one(spark, tmp_path):
    """Each checkpoint of the join writes two runs (the cycle's new elements of each side)
    and references the earlier checkpoints whose runs are still live; those whose runs all
    expired are deleted. A restart reads the runs back where they were saved and goes on
    with exactly the expected pairs.
    """
    folder, out = tmp_path / "ck", tmp_path / "out"
    eng = Engine(spark=spark, trusted=True, checkpoint_dir=str(folder))
    eng.execute(QUERY.format(out=out))
    state = folder / "state"
    for cycle in range(8):
        a, b = events(cycle)
        eng.push("a", a, watermark=10 * cycle + 10)
        eng.push("b", b, watermark=10 * cycle + 10)
        eng.run_cycle()
        eng.wait_for_checkpoint()  # written in the background
        latest = (folder / "LATEST").read_text().strip()
        written = json.loads((state / latest / "frames.json").read_text())
        assert sorted(written) == ["runs/0", "runs/1"], (cycle, written)
        # an element lives 30 units, three cycles: the runs of the two checkpoints before
        # this one hold elements that end after this cycle
        referenced = json.loads((state / latest / "references.json").read_text())
        assert referenced == [str(c) for c in range(max(1, cycle - 1), cycle + 1)]
        assert sorted(os.listdir(state), key=int) == [*referenced, latest]
    restarted = Engine(spark=spark, trusted=True, checkpoint_dir=str(folder))
    for cycle in range(8, CYCLES):
        a, b = events(cycle)
        restarted.push("a", a, watermark=10 * cycle + 10)
        restarted.push("b", b, watermark=10 * cycle + 10)
        restarted.run_cycle()
    pairs = committed_pairs(out)
    assert sorted(pairs) == sorted(expected_pairs(CYCLES))


@pytest.mark.slow
@pytest.mark.parametrize("kill_at", [3, 7])
def test_a_crash_between_a_checkpoints_runs_and_its_switch_loses_and_repeats_nothing(
        tmp_path, kill_at):
    """The job is killed in a checkpoint whose new runs and manifests are written but which
    is not the latest yet (once before any run expired, once after); restarted, it redoes
    the cycle after the latest state and goes on: every pair once, none missing.
    """
    folder, out = tmp_path / "ck", tmp_path / "out"
    first = run_job(folder, out, kill_at)
    assert f"killed before the switch to state {kill_at}" in first
    assert "done" not in first
    second = run_job(folder, out)
    # the checkpoint is written in the background: the job may have run (and logged) a
    # cycle after it before it was killed; the restart redoes that one too
    started = int(second.split("started at cycle ")[1].split()[0])
    assert kill_at <= started <= kill_at + 1 and "done" in second
    pairs = committed_pairs(out)
    assert len(pairs) == len(set(pairs))
    assert set(pairs) == expected_pairs(CYCLES)
