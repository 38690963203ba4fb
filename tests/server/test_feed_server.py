"""The feed over real sockets (``docs/feed.md``): ``sparkcq serve`` in one process, a producer
process (tests/feed_client.py, on ``sparkcq.client.Feed``) feeding two streams, and raw
sockets for the messages a client library would never send.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pytest
from served import TESTS, start_server, wait_for

from sparkcq.inspection import close_elements

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("feed"), "--max-body-bytes", "100000",
                          "--max-queued-rows", "60")
    yield server
    server.stop()


class Producer:
    """The producer process: one order in, one answer out."""

    def __init__(self, port: int):
        path = os.pathsep.join(p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(TESTS, "feed_client.py"), "127.0.0.1", str(port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONPATH": path})

    def __call__(self, stream: str, do: str, **fields: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"stream": stream, "do": do, **fields}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        assert self.proc.wait(60) == 0


def records(served, query: str) -> list[tuple]:
    """The query's elements so far (an open one closed by its later close record)."""
    frame, _ = served.client.results(query)
    if "_op" in frame.columns:
        frame = close_elements(frame, [c for c in frame.columns if not c.startswith("_")])
    return sorted((tuple(None if v != v else v for v in r)  # NaN: NULL
                   for r in frame.itertuples(index=False)), key=repr)


def query(served, name: str) -> dict[str, Any]:
    return served.client.query(name)


def test_a_producer_process_feeds_a_join_and_an_aggregate(served):
    c = served.client
    c.submit("CREATE STREAM a WITH (source='feed'); CREATE STREAM b WITH (source='feed')")
    streams = {s["name"]: s for s in c.submit("SHOW STREAMS")}
    assert streams["a"]["state"] == "not connected" and streams["a"]["schema"] == "struct<>"
    feed = Producer(served.feed_port)
    try:
        answer = feed("a", "header", columns="k BIGINT, t BIGINT, v DOUBLE", event_time="t")
        assert answer["change"] == "connected"
        feed("b", "header", columns=[["k", "BIGINT"], ["t", "BIGINT"], ["w", "STRING"]],
             event_time="t")
        assert {s["name"]: s["state"] for s in c.submit("SHOW STREAMS")} == \
            {"a": "connected", "b": "connected"}
        c.submit("CREATE QUERY j AS SELECT a.k, v, w FROM a [RANGE 10], b [RANGE 10] "
                 "WHERE a.k = b.k")
        c.submit("CREATE QUERY g AS SELECT k, COUNT(*) AS n FROM a GROUP BY k")
        c.submit("CREATE QUERY bk WITH (on_remove='keep') AS "
                 "SELECT k, COUNT(*) AS n FROM b [RANGE 10] GROUP BY k")
        sent = feed("a", "send", rows=[{"k": 1, "t": 2, "v": 0.5}, {"k": 1, "t": 8, "v": 1.5},
                                       {"k": 1, "t": 50, "v": 2.5}])
        assert sent["accepted"] == 3 and sent["errors"] == []
        assert feed("b", "send_arrow", rows=[{"k": 1, "t": 3, "w": "x"},
                                             {"k": 2, "t": 5, "w": "y"}])["accepted"] == 2
        feed("a", "boundary", time=100)
        # b is quiet after t=5: its watermark (5) lets the join start [3, 12) (its end is
        # not final before t=12), and holds back [8, 13)
        assert wait_for(lambda: records(served, "j") or None) == [(1, 0.5, "x", 3, None)]
        assert wait_for(lambda: len(records(served, "g")) == 3 and records(served, "g")) == [
            (1, 1, 2, 8), (1, 2, 8, 50), (1, 3, 50, None)]
        feed("b", "boundary", time=100)  # a heartbeat on the quiet stream: the join advances
        assert wait_for(lambda: len(records(served, "j")) == 2 and records(served, "j")) == [
            (1, 0.5, "x", 3, 12), (1, 1.5, "x", 8, 13)]

        # STOP pauses the readers of a until data comes again
        assert sorted(feed("a", "stop")["paused"]) == ["g", "j"]
        assert query(served, "g")["status"] == "paused"
        assert wait_for(lambda: {s["name"]: s["state"] for s in c.submit("SHOW STREAMS")}
                        ["a"] == "stopped")
        feed("a", "send", rows=[{"k": 2, "t": 101, "v": 1.0}])
        assert wait_for(lambda: query(served, "g")["status"] == "running")
        assert "resumed: data came again on stream 'a'" in query(served, "g")["log"][-1]

        # a HEADER that changes a's schema: g still compiles, a query of v does not
        c.submit("CREATE QUERY v_only AS SELECT v FROM a")
        changed = feed("a", "header", columns="k BIGINT, t BIGINT, v STRING, extra INT",
                       event_time="t")
        assert changed["change"] == "changed"
        assert sorted(changed["kept"]) == ["g", "j"] or sorted(changed["kept"]) == ["g"]
        assert "v_only" in changed["stopped"]
        log = query(served, "v_only")["log"][-1]
        assert "stream 'a' changed its schema" in log and "stopped: unknown column 'v'" in log
        assert query(served, "g")["status"] == "running"

        # REMOVE b: its readers stop with the reason, but bk, which keeps it, sees b's input
        # end: its window of the row at 104 (open until b's watermark passes 114) drains
        feed("b", "send", rows=[{"k": 2, "t": 104, "w": "z"}])
        removed = feed("b", "remove")
        assert removed["removed"] == "b" and removed["kept"] == ["bk"]
        jlog = query(served, "j")
        if "j" in removed["stopped"]:
            assert jlog["status"] == "stopped"
            assert "stopped: stream 'b' was removed: its feed removed it (REMOVE)" in \
                jlog["log"][-1]
        assert wait_for(lambda: (2, 1, 104, 114) in records(served, "bk"))
        assert set(records(served, "bk")) == {(1, 1, 3, 13), (2, 1, 5, 15), (2, 1, 104, 114)}
        assert query(served, "bk")["status"] == "running"
        assert {s["name"]: s["state"] for s in c.submit("SHOW STREAMS")}["b"] == "removed"
        c.submit("DROP QUERY bk")  # nothing reads b now: it goes before the next cycle
        assert wait_for(lambda: "b" not in {s["name"] for s in c.submit("SHOW STREAMS")})
        feed("a", "send", rows=[{"k": 2, "t": 102, "v": "two", "extra": 7}])
        feed("a", "boundary", time=200)
        assert wait_for(lambda: (2, 2, 102, None) in records(served, "g"))
    finally:
        feed.close()


# -- bad input over a raw socket ------------------------------------------------------------
class Raw:
    """A connection speaking the protocol by hand."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.file = self.sock.makefile("rb")

    def send(self, data: bytes) -> dict[str, Any]:
        self.sock.sendall(data)
        return json.loads(self.file.readline())

    def message(self, **fields: Any) -> dict[str, Any]:
        return self.send(json.dumps(fields).encode() + b"\n")

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def test_bad_messages_get_errors_and_dead_letters_and_the_connection_goes_on(served):
    c = served.client
    c.submit("CREATE STREAM bad WITH (source='feed'); CREATE STREAM other WITH (source='feed')")
    raw = Raw(served.feed_port)
    try:
        refused = raw.message(kind="CONNECT", stream="nosuch")
        assert not refused["ok"] and refused["error"].startswith("unknown stream 'nosuch'")
        answer = raw.message(kind="INSERTION", rows=[])
        assert answer["error"].startswith("send CONNECT first")
        assert raw.message(kind="CONNECT", stream="bad", producer="raw")["ok"]  # still usable
        early = raw.message(kind="INSERTION", seq=1, rows=[{"k": 1}])
        assert early["error"] == "stream 'bad' has no schema yet: send a HEADER before rows"
        assert raw.message(kind="HEADER", seq=2, columns="k BIGINT, t BIGINT, s STRING",
                           event_time="t")["ok"]
        good = {"kind": "INSERTION", "rows": [{"k": 0, "t": 100, "s": "ok"}]}
        cases = [
            (b"{this is not json\n", "the message is not JSON"),
            (b'{"kind": "INSERTION"}\n', 'an INSERTION needs "rows": a list of objects'),
            (b'{"kind": "BOUNDARY"}\n', 'a BOUNDARY needs "time"'),
            (b'{"kind": "ROWS", "rows": []}\n', "unknown message kind 'ROWS'"),
            (b'{"kind": "INSERTION", "rows": [], "s": 1}\n', "unknown field(s) 's'"),
            (b'{"kind": "INSERTION", "rows": ["' + b"x" * 120_000 + b'"]}\n',
             "the message is over the limit of 100,000 bytes; it was skipped"),
            (b'{"kind": "INSERTION", "format": "arrow", "bytes": 200000}\n' + b"\0" * 200_000,
             "the Arrow data has 200,000 bytes; the limit is 100,000; it was skipped"),
        ]
        for frame, error in cases:
            answer = raw.send(frame)
            assert not answer["ok"] and error in answer["error"], (frame[:40], answer)
            assert raw.message(**good)["accepted"] == 1  # the connection goes on
        typed = raw.message(kind="INSERTION", seq=3, rows=[
            {"k": 1, "t": 101, "s": "a"}, {"k": "x", "t": 102}, {"k": 2, "t": 103, "q": 1}])
        assert typed["ok"] and typed["accepted"] == 1
        assert typed["rejected"] == [
            {"index": 1, "column": "k",
             "reason": "'x' is not a whole number (column type BIGINT)"},
            {"index": 2, "column": "q", "reason": "unknown column; 'bad' has k, t, s"}]
        late = raw.message(kind="INSERTION", seq=4, rows=[{"k": 3, "t": 1}])
        assert late["accepted"] == 0 and late["late_rows"] == 1 and late["late"] == [
            {"index": 0, "column": "t",
             "reason": "late: event time 1 is before the stream's watermark 101"}]
        assert raw.message(kind="INSERTION", seq=3, rows=[{"k": 9, "t": 200}])["duplicate"]
    finally:
        raw.close()

    def dead() -> list[str] | None:
        frame, _ = c.dead_letters("bad")
        reasons = list(frame["_reason"]) if len(frame) else []
        return reasons if len(reasons) >= 10 else None

    reasons = "\n".join(wait_for(dead))
    for part in ("message refused: the message is not JSON",
                 'message refused: an INSERTION needs "rows"',
                 "message refused: the message is over the limit",
                 "message refused: the Arrow data has 200,000 bytes",
                 "'x' is not a whole number", "unknown column; 'bad' has k, t, s",
                 "late: event time 1 is before the watermark 101"):
        assert part in reasons
    assert c.submit("SHOW STREAMS")  # the server and the other stream are untouched
    assert c.status()["spark"] == "running"


def test_the_http_route_takes_json_lines_and_arrow(served):
    c = served.client
    c.submit("CREATE STREAM h WITH (source='feed')")
    header = {"kind": "HEADER", "columns": "k BIGINT, t BIGINT", "event_time": "t"}
    assert c.feed("h", json.dumps(header).encode())[0]["change"] == "connected"
    c.submit("CREATE QUERY hq AS SELECT k FROM h")
    lines = b"\n".join([
        json.dumps({"kind": "INSERTION", "seq": 1, "rows": [{"k": 1, "t": 1}]}).encode(),
        b"{oops",
        json.dumps({"kind": "BOUNDARY", "seq": 2, "time": 10}).encode()])
    answers = c.feed("h", lines, producer="web")
    assert [a["ok"] for a in answers] == [True, False, True]
    assert answers[1]["error"].startswith("the message is not JSON")
    table = pa.table({"k": [2, 3], "t": [11, 12]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    answers = c.feed("h", sink.getvalue().to_pybytes(), producer="web", arrow_seq=3)
    assert answers == [{"ok": True, "seq": 3, "accepted": 2}]
    assert c.feed("h", sink.getvalue().to_pybytes(), producer="web", arrow_seq=3)[0][
        "duplicate"]  # sent again: held already
    assert c.feed("h", b'{"kind": "BOUNDARY", "time": 99}')[0]["ok"]
    assert wait_for(lambda: len(records(served, "hq")) == 3 and records(served, "hq")) == [
        (1, 1, 1), (2, 11, 11), (3, 12, 12)]


def test_the_feed_command_replays_a_csv_file_at_a_rate(served, tmp_path):
    c = served.client
    c.submit("CREATE STREAM csvs WITH (source='feed')")
    path = tmp_path / "packets.csv"
    lines = ["pid,t,bytes"] + [f"{i},{i * 10},{100 + i}" for i in range(40)] + ["40,400,many"]
    path.write_text("\n".join(lines) + "\n")
    command = [sys.executable, "-m", "sparkcq.cli", "feed", "csvs", str(path), "--rate", "100",
               "--feed", f"127.0.0.1:{served.feed_port}", "--columns",
               "pid BIGINT, t BIGINT, bytes INT", "--event-time", "t"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (TESTS, os.environ.get("PYTHONPATH")) if p)}
    header = {"kind": "HEADER", "columns": "pid BIGINT, t BIGINT, bytes INT", "event_time": "t"}
    c.feed("csvs", json.dumps(header).encode())
    c.submit("CREATE QUERY total AS SELECT SUM(bytes) AS b FROM csvs [RANGE 1000]")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stderr  # one row refused
    assert "csvs: schema struct<pid:bigint,t:bigint,bytes:int> (unchanged)" in done.stdout
    assert "sent 41 rows to csvs" in done.stdout and "accepted 40, refused 1" in done.stdout
    assert "row 41, column 'bytes': 'many' is not a whole number (column type INT)" \
        in done.stdout
    seconds = float(done.stdout.split(" in ")[1].split(" s ")[0])
    assert seconds >= 0.3  # 41 rows at 100 rows/s: paced, not sent at once
    stdin = "\n".join(json.dumps({"pid": 50 + i, "t": 500 + i, "bytes": 1}) for i in range(5))
    fed = subprocess.run([*command[:5], "-", "--feed", f"127.0.0.1:{served.feed_port}"],
                         input=stdin, capture_output=True, text=True, env=env, timeout=120)
    assert fed.returncode == 0 and "accepted 5, refused 0" in fed.stdout, fed.stderr
    c.feed("csvs", b'{"kind": "BOUNDARY", "time": 2000}')
    total = sum(100 + i for i in range(40)) + 5
    assert wait_for(lambda: any(r[0] == total for r in records(served, "total")))


def test_a_full_queue_slows_the_answers_instead_of_refusing(served):
    """60 rows may wait for a cycle (--max-queued-rows): a burst of 200 in messages of 40 is
    answered as cycles take rows, every message accepted, none refused for the bound.
    """
    c = served.client
    c.submit("CREATE STREAM burst WITH (source='feed')")
    raw = Raw(served.feed_port)
    try:
        assert raw.message(kind="CONNECT", stream="burst")["ok"]
        assert raw.message(kind="HEADER", columns="k BIGINT, t BIGINT", event_time="t")["ok"]
        frames = b"".join(json.dumps({"kind": "INSERTION", "seq": i + 1, "rows": [
            {"k": j, "t": i * 40 + j} for j in range(40)]}).encode() + b"\n" for i in range(5))
        raw.sock.sendall(frames)
        answers = [json.loads(raw.file.readline()) for _ in range(5)]
    finally:
        raw.close()
    assert [a.get("accepted") for a in answers] == [40] * 5, answers
    assert wait_for(lambda: c.status()["rows_processed"].get("burst") == 200)


def test_delete_messages_end_the_rows_of_a_keyed_feed_stream(served):
    c = served.client
    c.submit("CREATE STREAM rooms WITH (source='feed')")
    messages = [
        {"kind": "HEADER", "columns": "room STRING, t BIGINT, temp DOUBLE", "event_time": "t",
         "key": "room"},
        {"kind": "INSERTION", "rows": [{"room": "a", "t": 1, "temp": 20.0},
                                       {"room": "b", "t": 2, "temp": 18.0}]},
        {"kind": "DELETE", "rows": [{"room": "b", "t": 4}, {"t": 5}]},
        {"kind": "BOUNDARY", "time": 10}]
    c.feed("rooms", json.dumps(messages[0]).encode())
    c.submit("CREATE QUERY rooms_now AS SELECT room, temp FROM rooms")
    answers = c.feed("rooms", b"\n".join(json.dumps(m).encode() for m in messages[1:]))
    assert answers[0] == {"ok": True, "accepted": 2}
    assert answers[1]["deleted"] == 1
    assert answers[1]["rejected"][0]["column"] == "room"  # a delete names its key
    assert wait_for(lambda: len(records(served, "rooms_now")) == 2
                    and records(served, "rooms_now")) == [("a", 20.0, 1, None),
                                                          ("b", 18.0, 2, 4)]
