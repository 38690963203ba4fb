"""Issue 18: acknowledged feed input survives crashes and is processed exactly once
(input accepted by the feed is acknowledged only once it is durable; a crash and
restart resumes from the last committed cycle with exactly-once results in transactional
sinks).

``sparkcq serve --checkpoint DIR`` runs a projection of a feed stream into PostgreSQL. A
producer thread (``sparkcq.client.Feed`` under a fixed producer id) sends rows ``id`` 0, 1,
2, ... (event time ``t = id``) in numbered INSERTIONs, several in flight. The server is
killed with SIGKILL after a random number of acknowledged rows and a random delay: after
the end of a cycle (most kills hit its checkpoint), of a checkpoint, or at once; once
after the producer paused and the server checkpointed everything (a quiet restart, its
spool trimmed empty) with the next kill at once after it; and once more during a restart
(while Spark starts or recovery redoes the logged cycles). Each start checkpoints after
every cycle that took input or after every third. The server restarts on the same ports
and checkpoint directory, the Feed reconnects, the server says which message numbers it
holds and the Feed sends again the others. In the end the producer sends a BOUNDARY past
every row and waits until every message is acknowledged (the Feed resends until it is),
and the sink's table must hold each id sent exactly once.

``SPARKCQ_CRASH_SEED`` replays a seed's choices (the timing of a machine still varies);
``SPARKCQ_CRASH_KILLS`` asks for more kills than the suite's 2 (at least 2).
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from served import Served, start_server, wait_for

from sparkcq.client import Feed

BATCH = 100  # rows per INSERTION
PACE = 0.05  # seconds between INSERTIONs while the server is up
KILLS = int(os.environ.get("SPARKCQ_CRASH_KILLS") or 2)  # and one more during a restart
PRODUCER = "crash-test-producer"
TABLE = "feed_crash_rows"
QUERY = (f"CREATE QUERY fed INTO postgres WITH (database='db', table='{TABLE}') AS "
         "SELECT id, t FROM s")


class Producer(threading.Thread):
    """Sends rows through ``feed`` (which resends after reconnects) until ``finish`` is
    set, then a BOUNDARY past them, and waits until the server acknowledged everything.
    While ``pause`` is set it waits, every message acknowledged (then ``quiet`` is set).
    """

    def __init__(self, feed: Feed):
        super().__init__(daemon=True)
        self.feed = feed
        self.sent = 0  # rows 0 .. sent - 1
        self.finish = threading.Event()
        self.pause = threading.Event()
        self.quiet = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.finish.is_set():
                if self.pause.is_set():
                    self.feed.sync()
                    self.quiet.set()
                    while self.pause.is_set() and not self.finish.is_set():
                        time.sleep(0.05)
                    self.quiet.clear()
                    continue
                self.feed.send([{"id": i, "t": i} for i in range(self.sent, self.sent + BATCH)])
                self.sent += BATCH
                time.sleep(PACE)
            self.feed.boundary(self.sent + 1_000)
            self.feed.sync()
        except BaseException as e:  # noqa: BLE001 - the test reports it
            self.error = e


def lasting_port(rng: random.Random) -> int:
    """A free port below the ephemeral range: while the server is down, no outgoing
    connection (nor another process's Py4J gateway, which binds port 0) takes it.
    """
    low, _high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    while True:
        port = rng.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


class Server:
    """``sparkcq serve`` on fixed ports and one checkpoint directory, started again and
    again (each start logs into its own folder under ``root``).
    """

    def __init__(self, root: Path, url: str, rng: random.Random):
        self.root = root
        self.url = url
        self.rng = rng
        ports = random.Random()  # not the seed's: the kills stay as the seed says
        self.port = self.feed_port = lasting_port(ports)
        while self.feed_port == self.port:
            self.feed_port = lasting_port(ports)
        self.runs = 0
        self.starts: list[str] = []
        self.every: str | None = None  # the next start's, if not the seed's choice

    def args(self, folder: Path) -> tuple[str, ...]:
        """The options of every start; a checkpoint after every cycle that took input, or
        after every third (then restarts redo more cycles).
        """
        every = self.every or self.rng.choice(["1", "1", "3"])
        self.every = None
        self.starts.append(f"{folder.name}: every {every}")
        return ("--checkpoint", str(self.root / "checkpoint"), "--database", f"db={self.url}",
                "--checkpoint-every", every)

    def folder(self) -> Path:
        folder = self.root / f"run{self.runs}"
        self.runs += 1
        folder.mkdir()
        return folder

    def latest(self) -> str | None:
        """The cycle of the newest checkpoint, if any."""
        path = self.root / "checkpoint" / "LATEST"
        return path.read_text() if path.exists() else None

    def start(self, wait: bool = True) -> Served:
        folder = self.folder()
        return start_server(folder, *self.args(folder), port=self.port,
                            feed_port=self.feed_port, wait=wait)

    def start_and_kill_early(self) -> str:
        """Start the server and kill it before it answers: while Spark starts, or a
        random moment after recovery applied the feed's HEADER again.
        """
        served = self.start(wait=False)
        began = time.monotonic()
        if self.rng.random() < 0.25:
            time.sleep(self.rng.uniform(2, 8))
            where = f"{time.monotonic() - began:.1f} s after the start"
        else:
            while "stream s: connected" not in served.log_text() \
                    and served.proc.poll() is None and time.monotonic() < began + 120:
                time.sleep(0.05)
            time.sleep(self.rng.uniform(0, 3))
            where = f"{time.monotonic() - began:.1f} s after the start, in recovery"
        served.stop()  # SIGKILL
        if "recovered from" in served.log_text():
            where += " (it had recovered)"
        return where


def processed(served: Served) -> None:
    """Wait until the cycle after the one that took the stream's last queued input ran."""
    wait_for(lambda: served.client.status()["queued_rows"].get("s") == 0, timeout=120)
    cycle = served.client.status()["cycles"]
    wait_for(lambda: served.client.status()["cycles"] >= cycle + 2, timeout=120)


@pytest.mark.slow
def test_feed_acknowledged_rows_are_processed_once_across_sigkills(postgres, tmp_path):
    import psycopg

    seed = int(os.environ.get("SPARKCQ_CRASH_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    began = time.monotonic()
    early = rng.randrange(KILLS)  # the kill after which a restart is killed too
    # each kill comes after some acknowledged rows and: after the end of a cycle (then
    # most kills hit its checkpoint), of a checkpoint (then the next cycles' commits), or
    # at once; and once the producer paused and the server took and checkpointed
    # everything (a quiet restart: the spool is trimmed empty), followed at once by the
    # next kill, before the restarted server's first checkpoint
    phases = [rng.choice(["cycle", "checkpoint", "soon"]) for _ in range(KILLS)]
    quiet = rng.randrange(KILLS - 1)
    phases[quiet:quiet + 2] = ["quiet", "soon"]
    server = Server(tmp_path, postgres.url, rng)
    if quiet == 0:
        server.every = "1"  # the quiet cycle is checkpointed, the spool trimmed
    served = server.start()
    served.client.submit("CREATE STREAM s WITH (source='feed')")
    feed = Feed("s", port=server.feed_port, producer=PRODUCER, batch_rows=BATCH,
                max_in_flight=16, reconnect_seconds=240, timeout=240)
    feed.connect()
    feed.header("id BIGINT, t BIGINT", event_time="t")
    served.client.submit(QUERY)
    producer = Producer(feed)
    producer.start()
    kills: list[str] = []

    def context() -> str:
        return (f"seed {seed} (SPARKCQ_CRASH_SEED), kills: {kills}, checkpoints: "
                f"{server.starts}, logs in {tmp_path}")

    try:
        for trial, phase in enumerate(phases):
            # (before a quiet restart, more: the spool's numbers go higher)
            rows = feed.stats.accepted + rng.randint(*(20, 40) if phase == "quiet"
                                                     else (1, 15)) * BATCH
            cycles = served.client.status()["cycles"] + (
                0 if phase == "soon" else rng.randint(1, 2))
            latest = server.latest()
            deadline = time.monotonic() + 120
            while (feed.stats.accepted < rows or served.client.status()["cycles"] < cycles
                   or (phase == "checkpoint" and server.latest() == latest)) \
                    and producer.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if phase == "quiet":
                producer.pause.set()
                wait_for(lambda: producer.quiet.is_set() or not producer.is_alive(), 120)
                processed(served)
            delay = rng.uniform(0, 1 if phase == "soon" else 1.5)
            time.sleep(delay)
            at = (feed.stats.accepted, served.client.status()["cycles"], server.latest())
            served.stop()  # SIGKILL
            kills.append(f"{delay:.2f} s after the {phase} that reached {rows:,} rows "
                         f"acknowledged and cycle {cycles} (killed at {at[0]:,} rows, cycle "
                         f"{at[1]}, checkpoint {at[2]})")
            if trial == early:
                kills.append(f"then a restart {server.start_and_kill_early()}")
            if trial + 1 == quiet:
                server.every = "1"
            served = server.start()
            producer.pause.clear()
        producer.finish.set()
        producer.join(300)
        assert not producer.is_alive(), f"the producer did not finish; {context()}"
        assert producer.error is None, f"producer failed: {producer.error!r}; {context()}"
        assert not feed.stats.errors, f"messages refused: {feed.stats.errors[:3]}; {context()}"
        processed(served)
        status = served.client.query("fed")["status"]
        assert status == "running", (status, served.client.logs("fed"), context())
    except pytest.fail.Exception as e:  # a server that did not start again, a timeout
        pytest.fail(f"{e}; {context()}")
    finally:
        producer.finish.set()
        feed.drop_connection()
        served.stop()
    with psycopg.connect(postgres.conninfo(), autocommit=True) as conn:
        ids = [i for (i,) in conn.execute(f"SELECT id FROM {TABLE}").fetchall()]
        odd = conn.execute(f"SELECT count(*) FROM {TABLE} WHERE t <> id OR _ts <> id"
                           ).fetchone()[0]
    counts = Counter(ids)
    missing = sorted(set(range(producer.sent)) - set(counts))
    repeated = sorted(i for i, n in counts.items() if n > 1)
    assert not missing and not repeated and len(ids) == producer.sent, (
        f"{len(missing)} ids missing (first {missing[:10]}), {len(repeated)} repeated "
        f"(first {repeated[:10]}), {len(ids):,} rows for {producer.sent:,} ids; {context()}")
    assert odd == 0
    print(f"{producer.sent:,} rows, {len(kills)} kills, {feed.stats.duplicates} resends "
          f"recognised, {time.monotonic() - began:.0f} s; {context()}")
