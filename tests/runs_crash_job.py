"""The process tests/end_to_end/test_runs_checkpoint.py kills: a window join whose sides
are kept as runs, checkpointed after every cycle, its pairs written to a files sink.

``python tests/runs_crash_job.py CHECKPOINT_DIR OUT_DIR [KILL_AT]``: runs (or, with a
checkpoint, resumes) until cycle ``CYCLES`` - 1 is committed, then prints ``done``. With
``KILL_AT`` = n, the process kills itself (SIGKILL) in its n-th checkpoint once the new
runs and every manifest are written but before the checkpoint becomes the latest: between
a checkpoint's runs and its switch, what a crash there must not lose or repeat.
"""

from __future__ import annotations

import os
import signal
import sys

from sparkcq import Engine
from sparkcq.runtime.checkpoint import CheckpointStore

CYCLES = 12
WINDOW = 30
QUERY = f"""
CREATE STREAM a (id BIGINT, k BIGINT, t BIGINT) WITH (event_time='t');
CREATE STREAM b (id BIGINT, k BIGINT, t BIGINT) WITH (event_time='t');
CREATE QUERY pairs INTO files WITH (path='{{out}}', format='json') AS
  ISTREAM SELECT a.id AS ai, b.id AS bi FROM a [RANGE {WINDOW}] JOIN b [RANGE {WINDOW}]
  ON a.k = b.k;
"""


def events(cycle: int) -> tuple[list[dict[str, int]], list[dict[str, int]]]:
    """The rows of ``cycle``: ten a-rows and five b-rows at t = 10 cycle + i."""
    a = [{"id": 10 * cycle + i, "k": i % 3, "t": 10 * cycle + i} for i in range(10)]
    b = [{"id": 1000 + 10 * cycle + i, "k": i % 4, "t": 10 * cycle + i}
         for i in range(0, 10, 2)]
    return a, b


def kill_in_checkpoint(n: int) -> None:
    """SIGKILL this process in its ``n``-th commit of a checkpoint, before it switches."""
    calls = [0]
    commit = CheckpointStore.commit_state

    def dying(self: CheckpointStore, cycle: int) -> None:
        calls[0] += 1
        if calls[0] == n:
            print(f"killed before the switch to state {cycle}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        commit(self, cycle)

    CheckpointStore.commit_state = dying  # type: ignore[method-assign]


def main(folder: str, out: str, kill_at: str | None = None) -> None:
    if kill_at is not None:
        kill_in_checkpoint(int(kill_at))
    eng = Engine(master="local[2]", shuffle_partitions=2, trusted=True, checkpoint_dir=folder)
    if not eng.catalog.streams:
        eng.execute(QUERY.format(out=out))
    print(f"started at cycle {eng.cycle}", flush=True)
    while eng.cycle < CYCLES:
        a, b = events(eng.cycle)
        mark = 10 * eng.cycle + 10
        eng.push("a", a, watermark=mark)
        eng.push("b", b, watermark=mark)
        eng.run_cycle()
    print("done", flush=True)
    eng.stop()


if __name__ == "__main__":
    main(*sys.argv[1:4])
