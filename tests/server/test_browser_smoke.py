"""The real-browser fixtures (tests/conftest.py, tests/browser.py): the system's Chromium,
driven by Playwright, runs a page's JavaScript, which fetches from the page's server; after
a browser test, the other tests can still run event loops of their own.
"""

from __future__ import annotations

import asyncio
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PAGE = b"""<!doctype html>
<html><body>
<p id="sum"></p><p id="fetched"></p>
<script>
  document.getElementById("sum").textContent = String([1, 2, 3, 4].reduce((a, b) => a + b));
  fetch("/data.json").then(r => r.json()).then(d => {
    document.getElementById("fetched").textContent = d.rows.map(r => r.x * 2).join(",");
  });
</script>
</body></html>"""


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        routes = {"/": (PAGE, "text/html"),
                  "/data.json": (b'{"rows": [{"x": 1}, {"x": 20}]}', "application/json")}
        if self.path not in routes:
            self.send_error(404)
            return
        body, kind = routes[self.path]
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture
def site():
    """The page above, served on a free port of 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join()


def test_page_runs_javascript_that_fetches_from_its_server(page, site):
    page.goto(site + "/")
    assert page.text_content("#sum") == "10"
    page.wait_for_function("document.getElementById('fetched').textContent !== ''")
    assert page.text_content("#fetched") == "2,40"
    assert page.evaluate("navigator.userAgent").find("Chrome/") >= 0


@pytest.mark.parametrize("run", [1, 2])
def test_each_test_gets_a_fresh_context(page, site, run):
    page.goto(site + "/")
    assert page.evaluate("localStorage.getItem('seen')") is None
    page.evaluate("localStorage.setItem('seen', '1')")
    assert page.context.browser.is_connected()


def test_other_tests_may_run_event_loops_between_browser_tests():
    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert asyncio.run(answer()) == 42


def test_the_browser_still_works_after_another_event_loop_ran(page, site):
    page.goto(site + "/")
    assert page.text_content("#sum") == "10"
