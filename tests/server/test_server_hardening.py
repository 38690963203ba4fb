"""The service under a careless or hostile client, over HTTP against `sparkcq serve`:
typed ingest, 400 for what the API cannot read, body and queue limits, result retention,
loopback-only Spark ports, a clean stop on SIGTERM, a dead JVM noticed."""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest
from served import start_server, wait_for

from sparkcq.server.procs import descendants, listening

pytestmark = pytest.mark.slow

LIMITS = ("--max-body-bytes", "100000", "--max-queued-rows", "3000",
          "--max-rows-per-cycle", "1000", "--retain-rows", "40")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("hardening"), *LIMITS)
    server.client.submit("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
    yield server
    server.stop()


def send(served, method: str, path: str, body: bytes | None = None) -> tuple[int, dict, Any]:
    """Status, JSON answer and headers (case-insensitive) of one raw request."""
    req = urllib.request.Request(f"http://127.0.0.1:{served.port}{path}", data=body,
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read()), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers


def push(served, stream: str, rows, watermark=None) -> tuple[int, dict, Any]:
    body = {"rows": rows} | ({} if watermark is None else {"watermark": watermark})
    return send(served, "POST", f"/streams/{stream}/rows", json.dumps(body).encode())


def test_a_badly_typed_row_is_refused_alone_and_acknowledged_rows_are_processed(served):
    client = served.client
    client.submit("CREATE QUERY totals AS SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k")
    assert push(served, "s", [{"k": "a", "v": 1, "t": 1}])[0] == 200
    rows = [{"k": "a", "v": 2, "t": 2}, {"t": "abc"}, {"k": "b", "v": "x", "t": 3},
            {"k": "b", "v": 4, "t": 3}]
    status, answer, _ = push(served, "s", rows, watermark=5)
    assert status == 200
    assert answer["accepted"] == 2
    assert [(r["index"], r["column"]) for r in answer["rejected"]] == [(1, "t"), (2, "v")]
    assert "'abc' is not a whole number (column type BIGINT)" in answer["rejected"][0]["reason"]
    # the acknowledged rows, before and beside the bad ones, all count
    got = wait_for(lambda: (lambda f: f if len(f) >= 3 else None)(client.results("totals")[0]))
    assert sorted(zip(got["k"], got["total"], got["_ts"], strict=True)) == [
        ("a", 1, 1), ("a", 3, 2), ("b", 4, 3)]
    status, dead, _ = send(served, "GET", "/streams/s/dead-letters")
    assert status == 200 and dead["total"] == 2
    assert [json.loads(r["_raw"]) for r in dead["rows"]] == [{"t": "abc"},
                                                              {"k": "b", "v": "x", "t": 3}]
    assert served.client.status()["cycle_errors"] == 0
    client.drop("totals")


@pytest.mark.parametrize(("method", "path", "body", "fragment"), [
    ("POST", "/streams/s/rows", b"{not json", "the body is not JSON"),
    ("POST", "/streams/s/rows", b"[1, 2]", "needs a JSON object"),
    ("POST", "/streams/s/rows", b'{"rows": {"k": 1}}', "rows must be a list"),
    ("POST", "/streams/s/rows", b'{"rows": [], "watermark": "abc"}', "watermark 'abc'"),
    ("POST", "/streams/s/rows", b'{"row": []}', "unknown field(s) 'row'"),
    ("POST", "/statements", b"{not json", "the body is not JSON"),
    ("POST", "/statements", b'["CREATE"]', "needs a JSON body"),
    ("GET", "/queries/nosuch/results", None, "unknown query"),
    ("GET", "/streams/s/dead-letters?offset=-1", None, "offset='-1' must be a whole number"),
], ids=["malformed", "list body", "rows object", "watermark abc", "unknown field",
        "statement malformed", "statement list", "unknown query", "negative offset"])
def test_what_the_api_cannot_read_is_a_400_naming_the_problem(served, method, path, body,
                                                              fragment):
    status, answer, _ = send(served, method, path, body)
    assert status == (404 if fragment == "unknown query" else 400), answer
    assert fragment in answer["error"]


def test_offset_that_is_not_a_number_is_a_400(served):
    served.client.submit("CREATE QUERY ids AS SELECT k, v FROM s WHERE v > 1000")
    status, answer, _ = send(served, "GET", "/queries/ids/results?offset=xyz")
    assert status == 400 and "offset='xyz' must be a whole number" in answer["error"]
    served.client.drop("ids")


def test_a_body_over_the_limit_is_a_413_and_the_server_goes_on(served):
    rows = [{"k": "x" * 50, "v": i, "t": 100} for i in range(2000)]  # ~120 kB
    status, answer, _ = push(served, "s", rows)
    assert status == 413 and "limit is 100,000" in answer["error"]
    assert push(served, "s", rows[:10])[0] == 200


def test_a_full_queue_refuses_with_retry_after_and_takes_the_push_later(served):
    rows = [{"k": "q", "v": i, "t": 200} for i in range(1500)]
    refused = None
    for _ in range(10):  # the cycle takes the queue every half second: fill it faster
        answers = [push(served, "s", rows) for _ in range(3)]
        refused = next((a for a in answers if a[0] == 429), None)
        if refused:
            break
    assert refused is not None, "three quick pushes of 1,500 rows never met a full queue"
    status, answer, headers = refused
    assert "rows queued (at most 3,000); send the push again later" in answer["error"]
    assert headers["Retry-After"] == "1"
    assert wait_for(lambda: push(served, "s", rows)[0] == 200)
    assert wait_for(lambda: served.client.status()["queued_rows"]["s"] == 0)


def test_results_keep_only_the_newest_records_and_say_what_was_dropped(served):
    client = served.client
    client.submit("CREATE QUERY recent AS SELECT k, v FROM s [NOW] WHERE k = 'r'")
    client.submit("CREATE QUERY recent5 WITH (retain_rows='5') AS "
                  "SELECT k, v FROM s [NOW] WHERE k = 'r'")
    push(served, "s", [{"k": "r", "v": i, "t": 1000 + i} for i in range(100)], watermark=1200)
    page = wait_for(lambda: (lambda p: p if p[1]["end_offset"] >= 100 else None)(
        send(served, "GET", "/queries/recent/results?offset=0")))[1]
    assert (page["first_offset"], page["dropped"], len(page["rows"])) == (60, 60, 40)
    assert [r["v"] for r in page["rows"]] == list(range(60, 100))
    five = send(served, "GET", "/queries/recent5/results?offset=97&limit=2")[1]
    assert (five["first_offset"], five["offset"], [r["v"] for r in five["rows"]]) == (
        95, 99, [97, 98])
    with pytest.raises(Exception, match="retain_rows must be a positive number"):
        client.submit("CREATE QUERY bad WITH (retain_rows='lots') AS SELECT k FROM s")


def test_spark_listens_on_loopback_only(served):
    pids = descendants(served.proc.pid)
    ports = listening(pids)
    assert len(ports) >= 3, ports  # the API, the driver's RPC, the block manager (py4j too)
    assert all(host in ("127.0.0.1", "::1", "::ffff:127.0.0.1") for host, _ in ports), ports


def test_sigterm_processes_acknowledged_rows_and_stops_cleanly(tmp_path):
    server = start_server(tmp_path, "--interval", "2")
    try:
        out = server.data_root / "out"
        server.client.submit("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) "
                             "WITH (event_time='t')")
        server.client.submit(f"CREATE QUERY kept INTO files WITH (path='{out}', "
                             "format='json') AS SELECT k, v FROM s WHERE v >= 0")
        for i in range(20):
            status, answer, _ = push(server, "s", [{"k": "a", "v": i * 100 + j, "t": i * 100 + j}
                                                   for j in range(100)],
                                     watermark=(i + 1) * 100)
            assert status == 200 and answer["accepted"] == 100
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=90)
        log = server.log_text()
        assert code == 0, log[-3000:]
        assert "SIGTERM: stopping" in log and "sparkcq.server stopped" in log
        written = [json.loads(line) for f in sorted((out / "kept").glob("*.json*"))
                   for line in f.read_text().splitlines()]
        assert sorted(r["v"] for r in written) == list(range(2000))
    finally:
        server.stop()


def test_a_dead_jvm_is_noticed_blames_no_query_and_ends_the_service(tmp_path):
    server = start_server(tmp_path)
    try:
        client = server.client
        client.submit("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t')")
        client.submit("CREATE QUERY q AS SELECT k, v FROM s WHERE v > 0")
        jvm = [p for p in descendants(server.proc.pid) if p != server.proc.pid]
        assert jvm
        for pid in jvm:
            os.kill(pid, signal.SIGKILL)
        status, answer, _ = wait_for(lambda: (lambda r: r if r[0] == 503 else None)(
            send(server, "GET", "/status")))
        assert answer["spark"] == "failed" and answer["spark_failure"]
        assert answer["queries_failed"] == 0 and answer["queries_engine_failed"] == 1
        assert send(server, "GET", "/queries/q")[1]["status"] == "engine failed"
        code, refused, _ = push(server, "s", [{"k": "a", "v": 1, "t": 1}])
        assert code == 503 and "Spark is gone" in refused["error"]
        began = time.monotonic()
        assert server.proc.wait(timeout=60) == 3
        assert time.monotonic() - began < 30
    finally:
        server.stop()
