"""The web console in a real browser (Debian's Chromium driven by Playwright): a server with a
token, the page opened with it, a query submitted through the editor, rows pushed, results
and the plan updating live, a bad statement's error with its place, a dead letter, a query
dropped. Screenshots of each view go to ``test-artifacts/console/`` (or
``$SPARKCQ_ARTIFACTS/console``).
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from served import start_server

pytestmark = pytest.mark.slow

TOKEN = "console-test-token"
ARTIFACTS = Path(os.environ.get("SPARKCQ_ARTIFACTS",
                                Path(__file__).parents[2] / "test-artifacts")) / "console"
WAIT_MS = 60_000  # a cycle on a loaded 2-core machine can take seconds


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = start_server(tmp_path_factory.mktemp("console"), token=TOKEN)
    yield server
    server.stop()


def url(served, path="/"):
    return f"http://127.0.0.1:{served.port}{path}"


def http(served, path, method="GET", body=None, headers=None):
    """Status and JSON (or text) of a request made without the browser."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url(served, path), data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


def screenshot(page, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_the_console_refuses_without_the_token_and_works_with_it(served, page):
    from playwright.sync_api import expect

    answer = page.goto(url(served))
    assert answer.status == 401
    expect(page.locator("body")).to_contain_text("needs its token")
    for path in ("/console/snapshot", "/console/events", "/queries"):
        status, body = http(served, path)
        assert (status, body["kind"]) == (401, "AuthError"), path
    answer = page.goto(url(served, "/?token=wrong"))
    assert answer.status == 401
    expect(page.locator("body")).to_contain_text("not this server's")

    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    expect(page.locator("#connection")).to_have_text("live", timeout=WAIT_MS)
    expect(page.locator("#summary")).to_contain_text("cycle")
    [cookie] = page.context.cookies()
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert TOKEN not in cookie["value"]
    assert page.evaluate("document.cookie") == ""  # the page's scripts cannot read it

    # the cookie reads; it does not let another site change anything
    jar = {"Cookie": f"{cookie['name']}={cookie['value']}"}
    assert http(served, "/console/snapshot", headers=jar)[0] == 200
    status, body = http(served, "/statements", "POST", {"sql": "CREATE STREAM evil (t BIGINT) "
                                                                "WITH (event_time='t')"},
                        headers={**jar, "Origin": "http://evil.example"})
    assert status == 403 and "console's page" in body["error"]
    assert "evil" not in [s["name"] for s in http(
        served, "/streams", headers={"Authorization": f"Bearer {TOKEN}"})[1]]


def test_submit_push_see_results_and_plan_update_error_and_drop(served, page):
    from playwright.sync_api import expect

    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(url(served, f"/?token={TOKEN}"))  # sets the cookie, then the console
    assert page.url == url(served)
    expect(page.locator("#connection")).to_have_text("live", timeout=WAIT_MS)

    # a stream and a query through the editor
    page.fill("#editor", "CREATE STREAM s (k STRING, v BIGINT, t BIGINT, "
                         "pos STRUCT<x: DOUBLE, y: DOUBLE>) WITH (event_time='t', lateness='2');\n"
                         "CREATE QUERY total AS SELECT k, sum(v) AS total FROM s [RANGE 10] "
                         "GROUP BY k")
    page.click("#run")
    expect(page.locator("#editor-result .ok")).to_contain_text("total", timeout=WAIT_MS)
    row = page.locator('tr[data-query="total"]')
    expect(row).to_contain_text("running", timeout=WAIT_MS)
    expect(row).to_contain_text("memory")

    # the results view streams what the query emits after the page opened it
    row.locator("button[data-action=results]").click()
    expect(page.locator("#view-results")).to_be_visible()
    expect(page.locator("#timeline")).to_contain_text("No results yet", timeout=WAIT_MS)
    accepted = served.client.push("s", [{"k": "a", "v": 1, "t": 1}, {"k": "a", "v": 3, "t": 4}],
                                  watermark=20)
    assert accepted["accepted"] == 2
    table = page.locator("#results-table tbody tr")
    expect(table).to_have_count(3, timeout=WAIT_MS)
    expect(page.locator("#results-table")).not_to_contain_text("open", timeout=WAIT_MS)
    # sum per key over RANGE 10: 1 on [1, 4), 1 + 3 on [4, 11), 3 on [11, 14)
    rows = sorted(tuple(r.split("\t")) for r in table.all_inner_texts())
    assert rows == [("a", "1", "1", "4"), ("a", "3", "11", "14"), ("a", "4", "4", "11")]
    expect(page.locator("#timeline rect.bar")).to_have_count(3)
    expect(page.locator("#timeline")).to_contain_text("k=a")
    screenshot(page, "results")

    # the plan: every operator of EXPLAIN GLOBAL, then a second query shares the window
    page.click("#tabs button[data-view=plan]")
    explain = http(served, "/explain", headers={"Authorization": f"Bearer {TOKEN}"})[1]
    operators = [line for line in explain.splitlines() if line.startswith("#")]
    expect(page.locator("#plan g.node")).to_have_count(len(operators))
    scan = page.locator("#plan g.node", has_text="StreamScan s")
    expect(scan).to_contain_text("refs 1")
    page.click("#tabs button[data-view=queries]")
    page.fill("#editor", "CREATE QUERY many AS SELECT k, count(*) AS n FROM s [RANGE 10] "
                         "GROUP BY k")
    page.click("#run")
    expect(page.locator("#editor-result .ok")).to_contain_text("many", timeout=WAIT_MS)
    page.click("#tabs button[data-view=plan]")
    expect(page.locator("#plan g.node.shared", has_text="StreamScan s")).to_contain_text(
        "2 queries share it", timeout=WAIT_MS)
    expect(page.locator("#plan g.query-pill")).to_have_count(2)
    page.locator("#plan g.node", has_text="StreamScan s").click()
    expect(page.locator("#node-detail")).to_contain_text("many, total")
    screenshot(page, "plan")

    # a bad statement: its message, and its place underlined in the text
    page.click("#tabs button[data-view=queries]")
    page.fill("#editor", "CREATE QUERY bad AS SELECT kk FROM s")
    page.click("#run")
    expect(page.locator("#editor-result .error .message")).to_contain_text(
        "unknown column 'kk'", timeout=WAIT_MS)
    expect(page.locator("#editor-result .err-fragment")).to_have_text("kk")
    expect(page.locator("#editor-result")).to_contain_text("line 1, column 28")
    assert page.evaluate("[document.getElementById('editor').selectionStart, "
                         "document.getElementById('editor').selectionEnd]") == [27, 29]
    screenshot(page, "queries")

    # a late row is a dead letter, readable from the health view; a stream without events
    # yet has no watermark yet, said so
    served.client.submit("CREATE STREAM idle (k STRING, t BIGINT) WITH (event_time='t')")
    served.client.push("s", [{"k": "late", "v": 9, "t": 0}])
    page.click("#tabs button[data-view=health]")
    expect(page.locator('#health tr[data-stream="idle"]')).to_contain_text(
        "none yet", timeout=WAIT_MS)
    dead = page.locator('#health tr[data-stream="s"]')
    expect(dead).to_contain_text("latest dead letters", timeout=WAIT_MS)
    dead.locator("button").click()
    expect(page.locator("#dead-letters")).to_contain_text("late", timeout=WAIT_MS)
    expect(page.locator("#health .chart h3")).to_contain_text(
        ["Cycle latency", "Cycle cost", "Cycles per second", "Input rate"])
    # what a cycle cost: the driver's phases and the Spark work its jobs ran, as Spark
    # recorded it (a small cycle is one job of one stage and one task)
    cost = page.locator("#health .chart.cost")
    expect(cost).to_contain_text("Spark: 1 job, 1 stage, 1 task", timeout=WAIT_MS)
    expect(cost).to_contain_text("operators")
    expect(cost).to_contain_text("1 partition;")
    screenshot(page, "health")

    # streams with their nested attributes as a tree
    page.click("#tabs button[data-view=catalog]")
    schema = page.locator("#catalog ul.tree.root").first
    expect(schema.locator(":scope > li")).to_have_count(4)
    expect(schema.locator("li", has_text="pos").locator("ul li")).to_have_text(
        [re.compile(r"x\s+double"), re.compile(r"y\s+double")])
    screenshot(page, "catalog")

    # the log, then drop (asked twice)
    page.click("#tabs button[data-view=queries]")
    page.locator('tr[data-query="many"] button[data-action=log]').click()
    log = served.client.logs("many")
    expect(page.locator("#log")).to_have_text("\n".join(log), timeout=WAIT_MS)
    drop = page.locator('tr[data-query="total"] button[data-action=drop]')
    drop.click()
    expect(drop).to_have_text("confirm drop")
    drop.click()
    expect(page.locator("#editor-result .ok")).to_have_text("dropped total", timeout=WAIT_MS)
    expect(page.locator('tr[data-query="total"]')).to_have_count(0, timeout=WAIT_MS)
    assert [q["name"] for q in served.client.queries()] == ["many"]


def test_console_inputs_are_checked_and_bounded(served):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    # only the page's own files, by name; nothing else of the file system
    for path in ("/console/static/nope.js", "/console/static/__init__.py"):
        status, body = http(served, path, headers=bearer)
        assert status == 404 and body["kind"] == "UnknownNameError", path
    assert http(served, "/console/static/..%2F..%2Fapp.py", headers=bearer)[0] == 404
    status, text = http(served, "/console/static/console.js", headers=bearer)
    assert status == 200 and "sparkcq console" in text
    # the login form: a wrong token is refused, an oversized form too, before it is read
    request = urllib.request.Request(url(served, "/login"), data=b"token=nope", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401 and "is not this server" in refused.value.read().decode()
    request = urllib.request.Request(url(served, "/login"), data=b"token=" + b"x" * 5000,
                                     method="POST")
    with pytest.raises(urllib.error.HTTPError) as oversized:
        urllib.request.urlopen(request, timeout=30)
    assert oversized.value.code == 413 and "too large" in oversized.value.read().decode()
    # a results stream's starting offset is a whole number
    served.client.submit("CREATE STREAM inputs (t BIGINT) WITH (event_time='t')")
    served.client.submit("CREATE QUERY passing AS SELECT t FROM inputs")
    status, body = http(served, "/queries/passing/stream?from=-1", headers=bearer)
    assert status == 400 and "from='-1'" in body["error"]
