"""A Python client of the control API, standard library only.

from sparkcq.server.client import Client
c = Client()                                  # http://127.0.0.1:8765
c.submit("CREATE QUERY q AS SELECT ...")
frame, offset = c.results("q")
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pandas as pd

from sparkcq.errors import SparkcqError

DEFAULT_URL = "http://127.0.0.1:8765"


class ServerError(SparkcqError):
    """The server refused a request; ``kind`` is the server-side error class."""

    def __init__(self, message: str, status: int, kind: str):
        super().__init__(message)
        self.status = status
        self.kind = kind


class Client:
    """Talks to ``sparkcq serve`` (``SPARKCQ_SERVER``, ``SPARKCQ_TOKEN`` by default)."""

    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 300):
        self.url = (url or os.environ.get("SPARKCQ_SERVER") or DEFAULT_URL).rstrip("/")
        self.token = token or os.environ.get("SPARKCQ_TOKEN")
        self.timeout = timeout

    def _request(self, method: str, path: str, body: Any = None, raw: bool = False) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                text = resp.read().decode()
        except urllib.error.HTTPError as e:
            payload = e.read().decode()
            try:
                err = json.loads(payload)
                raise ServerError(err.get("error", payload), e.code, err.get("kind", "")) from None
            except json.JSONDecodeError:
                raise ServerError(payload or str(e), e.code, "") from None
        except urllib.error.URLError as e:
            msg = f"cannot reach the sparkcq server at {self.url}: {e.reason}"
            raise ServerError(msg, 0, "ConnectionError") from None
        return text if raw else json.loads(text)

    # -- statements and catalog --------------------------------------------------------------
    def submit(self, sql: str) -> Any:
        """Execute a statement or script; returns the last statement's result."""
        return self._request("POST", "/statements", {"sql": sql})["result"]

    def drop(self, name: str) -> None:
        """Drop a query."""
        self._request("DELETE", f"/queries/{_q(name)}")

    def streams(self) -> list[dict[str, Any]]:  # noqa: D102
        return self._request("GET", "/streams")

    def tables(self) -> list[dict[str, Any]]:  # noqa: D102
        return self._request("GET", "/tables")

    def functions(self) -> list[dict[str, Any]]:  # noqa: D102
        return self._request("GET", "/functions")

    def aggregates(self) -> list[dict[str, Any]]:  # noqa: D102
        return self._request("GET", "/aggregates")

    def queries(self) -> list[dict[str, Any]]:  # noqa: D102
        return self._request("GET", "/queries")

    def query(self, name: str) -> dict[str, Any]:
        """Status, text and log of one query."""
        return self._request("GET", f"/queries/{_q(name)}")

    def logs(self, name: str) -> list[str]:  # noqa: D102
        return self._request("GET", f"/queries/{_q(name)}/log")["log"]

    def explain(self, name: str | None = None, global_: bool = False, fmt: str = "text") -> str:
        """A query's plan, or the global plan (``fmt`` 'text' or 'dot')."""
        if name is not None and not global_:
            return self._request("GET", f"/queries/{_q(name)}/explain", raw=True)
        return self._request("GET", f"/explain?global=true&format={_q(fmt)}", raw=True)

    def metrics(self) -> dict[str, Any]:  # noqa: D102
        return self._request("GET", "/metrics")

    def status(self) -> dict[str, Any]:  # noqa: D102
        return self._request("GET", "/status")

    # -- data ----------------------------------------------------------------------------------
    def results(self, name: str, offset: int = 0) -> tuple[pd.DataFrame, int]:
        """Records of a query after the first ``offset``, and the offset to ask from next."""
        out = self._request("GET", f"/queries/{_q(name)}/results?offset={offset}")
        return pd.DataFrame.from_records(out["rows"]), out["offset"]

    def tail(self, name: str) -> Iterator[pd.DataFrame]:
        """Each cycle's new records of a query, as they are committed (server-sent events)."""
        req = urllib.request.Request(f"{self.url}/queries/{_q(name)}/stream")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        with urllib.request.urlopen(req, timeout=None) as resp:
            event = ""
            for line in resp:
                text = line.decode().rstrip("\n")
                if text.startswith("event:"):
                    event = text[6:].strip()
                elif text.startswith("data:"):
                    payload = json.loads(text[5:])
                    if event == "error":
                        raise ServerError(str(payload), 400, "")
                    yield pd.DataFrame.from_records(payload)
                elif not text:
                    event = ""

    def push(self, stream: str, rows: Any, watermark: Any = None, end: bool = False) -> int:
        """Send rows (dicts or a pandas frame) to a memory-source stream."""
        if isinstance(rows, pd.DataFrame):
            rows = json.loads(rows.to_json(orient="records", date_format="iso"))
        body = {"rows": list(rows or []), "watermark": watermark, "end": end}
        return self._request("POST", f"/streams/{_q(stream)}/rows", body)["accepted"]

    def shutdown(self) -> None:
        """Stop the server: queries stop cleanly and Spark is released."""
        self._request("POST", "/shutdown")


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")
