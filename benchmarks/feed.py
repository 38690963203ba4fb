"""The feed over loopback: rows per second one client gets acknowledged (JSON lines, Arrow
batches), and the latency from send to result at a fixed rate, with and without the
durable spool.

    .venv/bin/python benchmarks/feed.py            # or: make bench-feed
    .venv/bin/python benchmarks/feed.py --quick    # a few seconds per case, to try it

Starts ``sparkcq serve`` (``--master local[2]``, cycles every 0.5 s) twice: without
``--checkpoint`` (acknowledged means queued in memory) and with it (acknowledged means
written to the stream's spool and flushed to disk, one fsync per group of messages).
Against each it measures:

* **accepted rows/s** from one client (``sparkcq.client.Feed``) over loopback TCP, where
  acknowledged means ``sync()`` returned: JSON with one row per INSERTION, JSON with 1,000
  rows per INSERTION, Arrow tables of 10,000 rows (``send_table``). Each case feeds a
  fresh stream, which the engine drains as it runs (no query reads it). Peers in the same
  run: the same rows through the server's HTTP routes (``POST /streams/{s}/rows`` with
  JSON, ``POST /feed/{s}`` with Arrow), and the ceiling: the same bytes written by one
  client to a loopback socket that reads and discards them. Beside rows/s: MB/s on the
  wire, and each message's acknowledgement latency (from its write to its answer, with up
  to ``max_in_flight`` messages unanswered).
* **end-to-end latency** at a fixed rate: a producer sends JSON rows every 20 ms, each
  stamped with its send time (wall clock), and a BOUNDARY after each send; the query
  ``SELECT id, sent FROM s`` passes them through; a reader polls
  ``/queries/{q}/results`` every 50 ms and takes now - sent per row when it appears
  (p50/p90/p99/max, of the rows sent in the ``--seconds`` that begin ``--warmup`` seconds
  after the first result: a new query's first cycles are slow). Beside it, the server's
  cycles from ``/status`` sampled every 0.1 s: the cycle's own time
  (``last_cycle_seconds``; it leaves out the checkpoint written after the cycle) and the
  period between cycles.

Results go to ``benchmarks/results/<date>-feed.json`` (``<date>-quick-feed.json`` with
``--quick``). The numbers are only worth comparing when measured on a quiet machine.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from sparkcq.client import Feed
from sparkcq.server.client import Client, ServerError

RESULTS = Path(__file__).parent / "results"
COLUMNS = "id BIGINT, t BIGINT, k STRING, v DOUBLE, sent DOUBLE"
INTERVAL = 0.5  # seconds between the server's cycles
TICK = 0.02  # the fixed-rate producer sends every TICK seconds
POLL = 0.05  # the reader asks for new results every POLL seconds
SAMPLE = 0.1  # /status is read every SAMPLE seconds

# the ceiling's reader: reads each connection to its end and discards it, then answers how
# many bytes it read
DISCARD = """
import socket
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
while True:
    conn, _ = server.accept()
    with conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        total, buffer = 0, bytearray(1 << 20)
        while n := conn.recv_into(buffer):
            total += n
        conn.sendall(str(total).encode())
"""


# -- the server -----------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """``sparkcq serve`` in a subprocess, its control client and its feed port."""

    proc: subprocess.Popen
    client: Client
    port: int
    feed_port: int
    folder: Path
    checkpoint: bool

    @classmethod
    def start(cls, folder: Path, checkpoint: bool, max_queued_rows: int,
              checkpoint_every: int = 1) -> Server:
        port, feed_port = free_port(), free_port()
        args = (["--checkpoint", str(folder / "checkpoint"), "--checkpoint-every",
                 str(checkpoint_every)] if checkpoint else [])
        log = open(folder / "server.log", "w")  # noqa: SIM115 - lives as long as the server
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkcq.cli", "--master", "local[2]", "serve",
             "--port", str(port), "--feed-port", str(feed_port), "--interval", str(INTERVAL),
             "--max-queued-rows", str(max_queued_rows), *args],
            stdout=log, stderr=subprocess.STDOUT)
        client = Client(f"http://127.0.0.1:{port}")
        deadline = time.monotonic() + 180
        while True:
            try:
                client.status()
                return cls(proc, client, port, feed_port, folder, checkpoint)
            except ServerError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    raise SystemExit((folder / "server.log").read_text()[-3000:]) from None
                time.sleep(0.5)

    def stop(self) -> None:
        try:
            self.client.shutdown()
            self.proc.wait(timeout=120)
        except (ServerError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()

    def feed_stream(self, name: str) -> None:
        """Create the feed stream ``name`` and give it its schema."""
        self.client.submit(f"CREATE STREAM {name} WITH (source='feed')")
        with Feed(name, port=self.feed_port) as feed:
            feed.header(COLUMNS, event_time="t")

    def remove(self, name: str) -> None:
        """Take the stream away (its queue and spool with it)."""
        with Feed(name, port=self.feed_port) as feed:
            feed.remove()


# -- rows -------------------------------------------------------------------------------------
def make_rows(n: int, start: int = 0, sent: float = 0.0) -> list[dict[str, Any]]:
    """``n`` rows of the benchmark's stream: about 70 bytes each as JSON."""
    base = int(time.time() * 1000)
    return [{"id": i, "t": base + i // 1000, "k": f"key-{i % 1000}", "v": i * 0.5,
             "sent": sent} for i in range(start, start + n)]


def make_table(n: int) -> pa.Table:
    """The same rows as an Arrow table."""
    return pa.Table.from_pylist(make_rows(n), schema=pa.schema([
        ("id", pa.int64()), ("t", pa.int64()), ("k", pa.string()), ("v", pa.float64()),
        ("sent", pa.float64())]))


def arrow_stream(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream, as the client sends it."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def percentile(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def ms(value: float | None) -> float | None:
    return None if value is None else round(value * 1000, 2)


# -- accepted rows/s --------------------------------------------------------------------------
class TimedFeed(Feed):
    """The feed client, noting when each message is written and when its answer comes."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.written: dict[int, float] = {}
        self.answered: dict[int, float] = {}
        self.wire_bytes = 0

    def _transmit(self, sent: Any) -> None:
        # wait for room first (as Feed does after queueing), so that the time noted is the
        # write's, not the wait's
        while len(self._unacked) >= self.max_in_flight:
            self._receive(block=True)
        self.written.setdefault(sent.seq, time.perf_counter())
        self.wire_bytes += len(sent.frame)
        super()._transmit(sent)

    def _take(self, answer: dict[str, Any]) -> None:
        if answer.get("seq") is not None:
            self.answered.setdefault(answer["seq"], time.perf_counter())
        super()._take(answer)

    def ack_latencies(self) -> list[float]:
        return [self.answered[s] - t for s, t in self.written.items() if s in self.answered]


@dataclass
class Case:
    """What one way of sending gave: rows, bytes, seconds, per-message latencies."""

    name: str
    rows: int
    messages: int
    wire_bytes: int
    seconds: float
    latencies: list[float] = field(default_factory=list)
    accepted: int | None = None
    processed_during: int | None = None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "case": self.name, "rows": self.rows, "messages": self.messages,
            "rows_per_message": self.rows // max(1, self.messages),
            "seconds": round(self.seconds, 3),
            "rows_per_s": round(self.rows / self.seconds),
            "mb_per_s": round(self.wire_bytes / self.seconds / 1e6, 2),
            "bytes_per_row": round(self.wire_bytes / self.rows, 1)}
        if self.latencies:
            out.update(ack_p50_ms=ms(percentile(self.latencies, 0.5)),
                       ack_p99_ms=ms(percentile(self.latencies, 0.99)),
                       ack_max_ms=ms(max(self.latencies)))
        if self.accepted is not None:
            out["accepted"] = self.accepted
        if self.processed_during is not None:
            out["processed_by_engine_meanwhile"] = self.processed_during
        return out


def processed(server: Server, stream: str) -> int:
    return int(server.client.status()["rows_processed"].get(stream, 0))


def feed_case(server: Server, name: str, rows: list[dict[str, Any]] | None,
              tables: list[pa.Table] | None, batch_rows: int, max_in_flight: int) -> Case:
    """Send ``rows`` (JSON, ``batch_rows`` per INSERTION) or ``tables`` (Arrow, one each)
    to a fresh stream through one ``Feed``; timed from the first send to ``sync()``.
    """
    stream = f"tp_{name.replace('-', '_')}_{int(server.checkpoint)}"
    server.feed_stream(stream)
    with TimedFeed(stream, port=server.feed_port, batch_rows=batch_rows,
                   max_in_flight=max_in_flight) as feed:
        began = time.perf_counter()
        if rows is not None:
            for i in range(0, len(rows), batch_rows):
                feed.send(rows[i:i + batch_rows])
        for table in tables or []:
            feed.send_table(table)
        stats = feed.sync()
        seconds = time.perf_counter() - began
    n = len(rows) if rows is not None else sum(t.num_rows for t in tables or [])
    if stats.errors or stats.accepted != n:
        msg = f"{name}: {stats.accepted} of {n} rows accepted; refusals: {stats.errors[:3]}"
        raise RuntimeError(msg)
    case = Case(name, n, len(feed.written), feed.wire_bytes, seconds, feed.ack_latencies(),
                stats.accepted, processed(server, stream))
    server.remove(stream)
    return case


def http_case(server: Server, name: str, chunks: list[Any], encode: Callable[[Any], bytes],
              path: str, content_type: str) -> Case:
    """POST each chunk of rows, encoded by ``encode`` (timed, as the feed client's encoding
    is), in turn on one keep-alive connection.
    """
    stream = f"tp_{name.replace('-', '_')}_{int(server.checkpoint)}"
    server.feed_stream(stream)
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
    latencies, accepted, wire = [], 0, 0
    began = time.perf_counter()
    for chunk in chunks:
        body = encode(chunk)
        while True:
            sent = time.perf_counter()
            conn.request("POST", path.format(stream=stream), body,
                         {"Content-Type": content_type})
            resp = conn.getresponse()
            answer = json.loads(resp.read())
            if resp.status != 429:
                break
            time.sleep(float(resp.headers.get("Retry-After", "1")))
        if resp.status != 200:
            msg = f"{name}: {resp.status} {answer}"
            raise RuntimeError(msg)
        latencies.append(time.perf_counter() - sent)
        wire += len(body)
        accepted += (answer["accepted"] if "accepted" in answer
                     else sum(a.get("accepted", 0) for a in answer["answers"]))
    seconds = time.perf_counter() - began
    conn.close()
    case = Case(name, sum(len(c) if isinstance(c, list) else c.num_rows for c in chunks),
                len(chunks), wire, seconds, latencies, accepted, processed(server, stream))
    server.remove(stream)
    return case


def ceiling_case(name: str, frames: list[bytes], rows: int) -> Case:
    """Write ``frames`` to a loopback socket whose reader discards them; timed until the
    reader has read the last byte (it answers with the count after the writer closes).
    """
    proc = subprocess.Popen([sys.executable, "-c", DISCARD], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            began = time.perf_counter()
            for frame in frames:
                sock.sendall(frame)
            sock.shutdown(socket.SHUT_WR)
            total = int(sock.recv(64))
            seconds = time.perf_counter() - began
    finally:
        proc.kill()
        proc.wait()
    assert total == sum(map(len, frames)), (total, sum(map(len, frames)))
    return Case(name, rows, len(frames), total, seconds)


@dataclass(frozen=True)
class Volumes:
    """Rows per throughput case."""

    single: int  # JSON, one row per message
    batched: int  # JSON, 1,000 rows per message
    arrow: int  # Arrow, 10,000 rows per message

    @classmethod
    def of(cls, quick: bool) -> Volumes:
        return cls(5_000, 100_000, 200_000) if quick else cls(50_000, 1_000_000, 2_000_000)


BATCH_ROWS = 1_000
ARROW_ROWS = 10_000


def median_run(runs: list[Case]) -> dict[str, Any]:
    """The run with the median rows/s, and the rows/s of every run."""
    ordered = sorted(runs, key=lambda c: c.rows / c.seconds)
    summary = ordered[(len(ordered) - 1) // 2].summary()
    summary["rows_per_s_runs"] = [round(c.rows / c.seconds) for c in runs]
    return summary


def throughput(server: Server, volumes: Volumes, max_in_flight: int,
               repeat: int) -> list[dict[str, Any]]:
    """The accepted rows/s of each way of sending: each case ``repeat`` times in turn, the
    median run reported.
    """
    single = make_rows(volumes.single)
    batched = make_rows(volumes.batched)
    table = make_table(volumes.arrow)
    tables = [table.slice(i, ARROW_ROWS) for i in range(0, table.num_rows, ARROW_ROWS)]
    chunks = [batched[i:i + BATCH_ROWS] for i in range(0, len(batched), BATCH_ROWS)]
    cases: list[tuple[str, Callable[[str], Case]]] = [
        ("tcp-json-1", lambda name: feed_case(server, name, single, None, 1, max_in_flight)),
        ("tcp-json-1000", lambda name: feed_case(server, name, batched, None, BATCH_ROWS,
                                                 max_in_flight)),
        ("tcp-arrow-10000", lambda name: feed_case(server, name, None, tables, ARROW_ROWS,
                                                   max_in_flight)),
        ("http-rows-json-1000", lambda name: http_case(
            server, name, chunks,
            lambda rows: json.dumps({"rows": rows}, separators=(",", ":")).encode(),
            "/streams/{stream}/rows", "application/json")),
        ("http-feed-arrow-10000", lambda name: http_case(
            server, name, tables, arrow_stream, "/feed/{stream}",
            "application/vnd.apache.arrow.stream")),
    ]
    runs: dict[str, list[Case]] = {name: [] for name, _ in cases}
    for i in range(repeat):
        for name, run in cases:
            case = run(f"{name}-{i}")
            case.name = name
            runs[name].append(case)
    return [median_run(r) for r in runs.values()]


class CapturedFeed(Feed):
    """The feed client, keeping the frames it would send: the same bytes, without a server."""

    def __init__(self, batch_rows: int):
        super().__init__("captured", batch_rows=batch_rows)
        self.frames: list[bytes] = []

    def _transmit(self, sent: Any) -> None:
        self.frames.append(sent.frame)


def ceilings(volumes: Volumes, repeat: int) -> list[dict[str, Any]]:
    """The bytes the TCP cases send, encoded by the feed client (timed on its own) and
    written to a socket that discards them.
    """
    single = make_rows(volumes.single)
    batched = make_rows(volumes.batched)
    table = make_table(volumes.arrow)
    tables = [table.slice(i, ARROW_ROWS) for i in range(0, table.num_rows, ARROW_ROWS)]
    out = []
    for name, rows, batch_rows in (("tcp-json-1", single, 1),
                                   ("tcp-json-1000", batched, BATCH_ROWS),
                                   ("tcp-arrow-10000", None, ARROW_ROWS)):
        feed = CapturedFeed(batch_rows)
        began = time.perf_counter()
        if rows is not None:
            feed.send(rows)
            feed.flush()
        for t in tables if rows is None else []:
            feed.send_table(t)
        seconds = time.perf_counter() - began
        n = len(rows) if rows is not None else table.num_rows
        summary = median_run([ceiling_case(f"socket-{name}", feed.frames, n)
                              for _ in range(repeat)])
        summary["client_encoding_rows_per_s"] = round(n / seconds)
        out.append(summary)
    return out


# -- latency ------------------------------------------------------------------------------
def produce(server: Server, stream: str, rate: int, stop: threading.Event,
            counts: dict[str, int]) -> None:
    """Send ``rate`` rows per second in sends every TICK, each row stamped with its send
    time, then a BOUNDARY past them: no cycle waits for a later row to emit them.
    """
    with Feed(stream, port=server.feed_port, batch_rows=10 * rate) as feed:
        began = time.time()
        next_id = 0
        boundary = 0
        while not stop.is_set():
            due = int((time.time() - began) * rate)
            if due > next_id:
                now = time.time()
                t = max(int(now * 1000), boundary)
                feed.send([{"id": i, "t": t, "k": f"key-{i % 1000}", "v": i * 0.5,
                            "sent": now} for i in range(next_id, due)])
                feed.flush()
                boundary = t + 1
                feed.boundary(boundary)
                next_id = due
            time.sleep(max(0.0, TICK - (time.time() - began) % TICK))
        feed.sync()
        counts["sent"] = next_id
        counts["late"] = len(feed.stats.late)
        counts["rejected"] = len(feed.stats.rejected)


def get_json(conn: http.client.HTTPConnection, path: str) -> Any:
    conn.request("GET", path)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        msg = f"GET {path}: {resp.status} {body[:300]!r}"
        raise RuntimeError(msg)
    return json.loads(body)


@dataclass
class CycleSamples:
    """``/status`` read every SAMPLE seconds: when each cycle ended, its time, its rows."""

    samples: list[tuple[float, int, float | None, int]] = field(default_factory=list)

    def add(self, at: float, status: dict[str, Any], stream: str) -> None:
        self.samples.append((at, status["cycles"], status["last_cycle_seconds"],
                             status["rows_processed"].get(stream, 0)))

    def between(self, start: float, stop: float) -> dict[str, Any]:
        """The cycles that ended between ``start`` and ``stop`` and took rows: their own
        time (without the checkpoint written after them) and the period between them. A
        cycle takes its rows when it starts, so its rows show in samples before its end.
        """
        ends = [(at, cycles, seconds, rows) for (at, cycles, seconds, rows), prev
                in zip(self.samples[1:], self.samples, strict=False) if cycles > prev[1]]
        own, periods = [], []
        for (at, cycles, seconds, rows), prev in zip(ends[1:], ends, strict=False):
            if start <= at <= stop and rows > prev[3] and seconds is not None:
                own.append(seconds)
                periods.append((at - prev[0]) / (cycles - prev[1]))
        return {"cycles_with_rows": len(own),
                "cycle_p50_ms": ms(percentile(own, 0.5)),
                "cycle_p90_ms": ms(percentile(own, 0.9)),
                "cycle_max_ms": ms(max(own, default=None)),
                "cycle_period_p50_ms": ms(percentile(periods, 0.5)),
                "cycle_period_max_ms": ms(max(periods, default=None))}


def latency(server: Server, rate: int, seconds: float, warmup: float) -> dict[str, Any]:
    """Send at ``rate`` rows/s; the latency of each row sent during ``seconds`` that begin
    ``warmup`` seconds after the first result appeared (a new query's first cycles are
    slow), from its send to the reader seeing it in the query's results.
    """
    stream = f"e2e_{rate}_{int(server.checkpoint)}"
    query = f"{stream}_q"
    server.feed_stream(stream)
    server.client.submit(f"CREATE QUERY {query} AS SELECT id, sent FROM {stream}")
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    offset = get_json(conn, f"/queries/{query}/results?limit=1")["end_offset"]
    stop, counts = threading.Event(), {}
    producer = threading.Thread(target=produce, args=(server, stream, rate, stop, counts))
    producer.start()
    waits: list[float] = []
    seen: set[int] = set()
    cycles = CycleSamples()
    dropped = 0
    next_sample = 0.0
    measured_from = measured_to = float("inf")
    give_up = time.time() + 180
    while True:
        now = time.time()
        if now >= measured_to and not stop.is_set():
            stop.set()
            producer.join()
            give_up = now + 60
        if now >= next_sample:
            cycles.add(now, get_json(conn, "/status"), stream)
            next_sample = now + SAMPLE
        page = get_json(conn, f"/queries/{query}/results?offset={offset}&limit=10000")
        now = time.time()
        dropped += page["dropped"]
        offset = page["offset"]
        if page["rows"] and measured_from == float("inf"):
            measured_from = now + warmup
            measured_to = measured_from + seconds
        for row in page["rows"]:
            seen.add(row["id"])
            if measured_from <= row["sent"] < measured_to:
                waits.append(now - row["sent"])
        if (stop.is_set() and len(seen) >= counts["sent"]) or now > give_up:
            break
        if not page["rows"]:
            time.sleep(POLL)
    if not stop.is_set():
        stop.set()
        producer.join()
    if not waits:
        msg = f"no result of {query} within 180 s: {cycles.samples[-1:]}"
        raise RuntimeError(msg)
    conn.close()
    server.client.drop(query)
    server.remove(stream)
    return {
        "rate": rate, "seconds": seconds, "warmup_after_first_result": warmup,
        "rows_sent": counts["sent"], "rows_measured": len(waits),
        "rows_missing": counts["sent"] - len(seen), "dropped_by_retention": dropped,
        "late": counts["late"], "rejected": counts["rejected"],
        "latency_p50_ms": ms(percentile(waits, 0.5)),
        "latency_p90_ms": ms(percentile(waits, 0.9)),
        "latency_p99_ms": ms(percentile(waits, 0.99)),
        "latency_max_ms": ms(max(waits, default=None)),
        **cycles.between(measured_from, measured_to)}


# -- the run --------------------------------------------------------------------------------
def machine() -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent, check=False).stdout.strip()
    return {"cores": os.cpu_count(), "load_average_at_start": os.getloadavg(),
            "python": platform.python_version(), "pyarrow": pa.__version__,
            "platform": platform.platform(), "commit": commit}


def run_config(checkpoint: bool, volumes: Volumes, rates: list[int], seconds: float,
               warmup: float, max_in_flight: int, repeat: int,
               checkpoint_every: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="sparkcq-feed-") as folder:
        queued = 2 * max(volumes.batched, volumes.arrow)
        server = Server.start(Path(folder), checkpoint, queued, checkpoint_every)
        try:
            out = {"checkpoint": checkpoint,
                   **({"checkpoint_every": checkpoint_every} if checkpoint else {}),
                   "acknowledged_means": ("in the spool, fsync'ed" if checkpoint
                                          else "queued in the server's memory"),
                   "max_queued_rows": queued,
                   "throughput": throughput(server, volumes, max_in_flight, repeat),
                   "latency": [latency(server, rate, seconds, warmup) for rate in rates]}
        except Exception:
            print((Path(folder) / "server.log").read_text()[-3000:], file=sys.stderr)
            raise
        finally:
            server.stop()
    by_case = {c["case"]: c for c in out["throughput"]}
    json_tcp, json_http = by_case["tcp-json-1000"], by_case["http-rows-json-1000"]
    arrow_tcp, arrow_http = by_case["tcp-arrow-10000"], by_case["http-feed-arrow-10000"]
    out["ratios"] = {
        "tcp_json_1000_vs_http_rows": round(json_tcp["rows_per_s"] / json_http["rows_per_s"], 2),
        "tcp_arrow_vs_http_feed_arrow": round(arrow_tcp["rows_per_s"] / arrow_http["rows_per_s"],
                                              2),
        "tcp_arrow_vs_tcp_json_1000": round(arrow_tcp["rows_per_s"] / json_tcp["rows_per_s"], 2)}
    return out


def table(result: dict[str, Any]) -> str:
    """The figures as a short text table."""
    ceiling = {c["case"].removeprefix("socket-"): c for c in result["ceiling"]}
    lines = [f"{'case':<24}{'spool':>6}{'rows/s':>11}{'MB/s':>8}{'ack p50':>9}{'ack p99':>9}"
             f"{'of ceiling':>11}"]
    for config in result["configs"]:
        for c in config["throughput"]:
            top = ceiling.get(c["case"])
            share = f"{c['rows_per_s'] / top['rows_per_s']:.3f}" if top else ""
            lines.append(f"{c['case']:<24}{'yes' if config['checkpoint'] else 'no':>6}"
                         f"{c['rows_per_s']:>11,}{c['mb_per_s']:>8}"
                         f"{c.get('ack_p50_ms') or '':>9}{c.get('ack_p99_ms') or '':>9}"
                         f"{share:>11}")
    for c in result["ceiling"]:
        lines.append(f"{c['case']:<24}{'':>6}{c['rows_per_s']:>11,}{c['mb_per_s']:>8}"
                     f"{'':>9}{'':>9}{'1.00':>11}   (client encodes "
                     f"{c['client_encoding_rows_per_s']:,} rows/s)")
    for config in result["configs"]:
        ratios = ", ".join(f"{k} {v}" for k, v in config["ratios"].items())
        lines.append(f"spool {'yes' if config['checkpoint'] else 'no'}: {ratios}")
    lines.append("")
    lines.append(f"{'send -> result':<16}{'spool':>6}{'rows/s':>8}{'p50 ms':>9}{'p90':>8}"
                 f"{'p99':>8}{'max':>8}{'cycle p50':>10}{'p90':>8}{'period':>8}{'missing':>8}")
    for config in result["configs"]:
        for x in config["latency"]:
            lines.append(f"{'':<16}{'yes' if config['checkpoint'] else 'no':>6}{x['rate']:>8,}"
                         f"{x['latency_p50_ms']!s:>9}{x['latency_p90_ms']!s:>8}"
                         f"{x['latency_p99_ms']!s:>8}{x['latency_max_ms']!s:>8}"
                         f"{x['cycle_p50_ms']!s:>10}{x['cycle_p90_ms']!s:>8}"
                         f"{x['cycle_period_p50_ms']!s:>8}{x['rows_missing']:>8}")
    load = result["machine"]
    lines.append(f"(ms; cycle: its own time, period: between cycle ends; load average "
                 f"{load['load_average_at_start'][0]:.1f} at the start, "
                 f"{load['load_average_at_end'][0]:.1f} at the end, {load['cores']} cores)")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="small volumes and 8 s per rate: to check that it runs")
    parser.add_argument("--rates", default="1000,10000", help="rows/s of the latency runs")
    parser.add_argument("--seconds", type=float, default=None,
                        help="measured seconds per rate (default 25; 8 with --quick)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds from the first result to the measured ones (default 5; 3 "
                             "with --quick)")
    parser.add_argument("--max-in-flight", type=int, default=64,
                        help="unacknowledged messages the client allows (Feed's default 64)")
    parser.add_argument("--repeat", type=int, default=None,
                        help="runs of each throughput case, the median reported (default 3; "
                             "1 with --quick)")
    parser.add_argument("--checkpoint-every", type=int, default=1, metavar="N",
                        help="the spooled server checkpoints every N cycles (default 1)")
    parser.add_argument("--spool", choices=("both", "off", "on"), default="both",
                        help="run without --checkpoint, with it, or both")
    parser.add_argument("--name", default=None, help="results file name, without .json")
    args = parser.parse_args()
    volumes = Volumes.of(args.quick)
    seconds = args.seconds or (8.0 if args.quick else 25.0)
    warmup = args.warmup if args.warmup is not None else (3.0 if args.quick else 5.0)
    rates = [int(r) for r in args.rates.split(",")]
    repeat = args.repeat or (1 if args.quick else 3)
    result: dict[str, Any] = {
        "benchmark": "feed", "quick": args.quick, "machine": machine(),
        "server": {"master": "local[2]", "interval_s": INTERVAL},
        "repeat": repeat,
        "client": {"max_in_flight": args.max_in_flight, "batch_rows": BATCH_ROWS,
                   "arrow_rows": ARROW_ROWS, "tick_s": TICK, "poll_s": POLL},
        "volumes": asdict(volumes),
        "ceiling": ceilings(volumes, repeat),
        "configs": [run_config(checkpoint, volumes, rates, seconds, warmup, args.max_in_flight,
                               repeat, args.checkpoint_every)
                    for checkpoint in {"both": (False, True), "off": (False,),
                                       "on": (True,)}[args.spool]]}
    result["machine"]["load_average_at_end"] = os.getloadavg()
    name = args.name or time.strftime("%Y-%m-%d") + ("-quick" if args.quick else "") + "-feed"
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    print(f"\nwritten: {RESULTS / (name + '.json')}")


if __name__ == "__main__":
    main()
