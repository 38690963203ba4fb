"""The service end to end: `sparkcq serve` in a subprocess, driven over HTTP."""

from __future__ import annotations

import subprocess
import time

import pandas as pd
import pytest
from served import start_server, wait_for

from sparkcq.inspection import close_elements
from sparkcq.server.client import ServerError

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    served = start_server(tmp_path_factory.mktemp("server"))
    yield served.client, served.proc, served.log
    served.stop()


def elements(client, name, cols):
    frame, _ = client.results(name)
    if frame.empty:
        return frame
    frame["_te"] = frame["_te"].astype("Int64")
    out = close_elements(frame, cols)
    return out.sort_values(["_ts", *cols]).reset_index(drop=True)


def test_submit_push_drop_explain_and_shutdown(server):
    client, proc, log = server
    client.submit("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    # min, not avg: avg over a per-event RANGE runs without the window (from its log), and
    # this test shares the window operator between the two queries
    assert client.submit("CREATE QUERY min_v AS SELECT k, min(v) AS a FROM s [RANGE 10] "
                         "GROUP BY k") == "min_v"
    client.submit("CREATE QUERY max_v AS SELECT k, max(v) AS m FROM s [RANGE 10] GROUP BY k")
    assert {q["name"] for q in client.queries()} == {"min_v", "max_v"}

    # data flows in batches while the loop cycles
    client.push("s", [{"k": "a", "v": 1.0, "t": 1}, {"k": "a", "v": 3.0, "t": 4}], watermark=5)
    client.push("s", [{"k": "a", "v": 8.0, "t": 12}], watermark=20)
    client.push("s", [], watermark=30)
    want = pd.DataFrame({"k": ["a"] * 3, "a": [1.0, 3.0, 8.0],
                         "_ts": [1, 11, 14], "_te": [11, 14, 22]})
    got = wait_for(lambda: (lambda f: f if len(f) == 3 and f["_te"].notna().all() else None)(
        elements(client, "min_v", ["k", "a"])))
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    mx = elements(client, "max_v", ["k", "m"])
    assert mx["m"].tolist() == [1.0, 3.0, 8.0] and mx["_te"].tolist() == [4, 12, 22]

    plan = client.explain(global_=True)
    window = next(line for line in plan.splitlines() if "Window" in line)
    assert "refs=2" in window and "queries=[max_v, min_v]" in window
    assert client.explain(global_=True, fmt="dot").startswith("digraph")
    assert "shared with max_v" in client.explain("min_v")

    client.drop("max_v")
    plan = client.explain(global_=True)
    assert "max_v" not in plan and "min_v" in plan
    with pytest.raises(ServerError) as err:
        client.logs("max_v")
    assert err.value.status == 404

    with pytest.raises(ServerError) as err:
        client.submit("CREATE QUERY bad AS SELECT k, avg(vv) FROM s [RANGE 10] GROUP BY k")
    assert err.value.status == 400 and "line 1, col" in str(err.value)
    assert "vv" in str(err.value)
    assert client.query("min_v")["status"] == "running"
    assert any("compiled" in line for line in client.logs("min_v"))
    assert client.status()["cycles"] > 0

    # a user aggregate created while the system runs, from an allowed module only
    with pytest.raises(ServerError) as err:
        client.submit("CREATE AGGREGATE dec(x DOUBLE) RETURNS DOUBLE USING 'json:JSONDecoder'")
    assert err.value.status == 400 and "--allow-udf-module json" in str(err.value)
    client.submit("CREATE AGGREGATE umax(x DOUBLE) RETURNS DOUBLE USING 'udas:UMax'")
    client.submit("CREATE QUERY top AS SELECT k, umax(v) AS m FROM s [RANGE 10] GROUP BY k")
    assert [(a["name"], a["used_by"]) for a in client.aggregates()] == [("umax", "top")]
    client.push("s", [{"k": "b", "v": 5.0, "t": 31}, {"k": "b", "v": 2.0, "t": 33}],
                watermark=50)
    top = wait_for(lambda: (lambda f: f if len(f) == 2 and f["_te"].notna().all() else None)(
        elements(client, "top", ["k", "m"])))
    assert top.values.tolist() == [["b", 5.0, 31, 41], ["b", 2.0, 41, 43]]
    assert elements(client, "min_v", ["k", "a"])["k"].tolist()[-2:] == ["b", "b"]

    began = time.monotonic()
    client.shutdown()
    try:
        code = proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(6)  # SIGABRT: faulthandler prints every thread's stack
        time.sleep(3)
        log.seek(0)
        pytest.fail(f"server still running after shutdown:\n{log.read()[-3000:]}")
    assert code == 0, log.seek(0) or log.read()[-3000:]
    print(f"shutdown took {time.monotonic() - began:.1f} s")
