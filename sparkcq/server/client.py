"""A Python client of the control API, standard library only.

from sparkcq.server.client import Client
c = Client()                                  # http://127.0.0.1:8765
c.submit("CREATE QUERY q AS SELECT ...")
frame, offset = c.results("q")
"""

from __future__ import annotations

import http.client
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

    def _open(self, method: str, path: str, body: Any = None,
              timeout: float | None = None,
              content_type: str = "application/json") -> http.client.HTTPResponse:
        """Send a request (``body``: JSON, or bytes sent as they are); every way it can fail
        becomes a ServerError saying what to check.
        """
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            msg = (f"{self.url!r} is not a server URL; give one like {DEFAULT_URL} "
                   "with --server or SPARKCQ_SERVER")
            raise ServerError(msg, 0, "ConnectionError")
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            raise _refusal(e) from None
        except urllib.error.URLError as e:
            msg = f"cannot reach the sparkcq server at {self.url}: {e.reason}"
            raise ServerError(msg, 0, "ConnectionError") from None
        except (OSError, http.client.HTTPException) as e:  # reset, timed out, not HTTP
            msg = f"the connection to the sparkcq server at {self.url} failed: {e!r}"
            raise ServerError(msg, 0, "ConnectionError") from None

    def _request(self, method: str, path: str, body: Any = None, raw: bool = False,
                 content_type: str = "application/json") -> Any:
        with self._open(method, path, body, self.timeout, content_type) as resp:
            try:
                text = resp.read().decode()
            except (OSError, http.client.HTTPException) as e:
                msg = f"the connection to the sparkcq server at {self.url} failed: {e!r}"
                raise ServerError(msg, 0, "ConnectionError") from None
        if raw:
            return text
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            msg = (f"{self.url}{path} did not answer with JSON; is {self.url} a sparkcq "
                   f"server? It answered: {text[:200]!r}")
            raise ServerError(msg, resp.status, "") from None

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

    def tail(self, name: str, from_beginning: bool = False) -> Iterator[pd.DataFrame]:
        """Each cycle's new records of a query, as they are committed (server-sent events);
        ``from_beginning``: first the records the server still keeps.

        An unknown query raises ServerError (404) before anything is yielded; the iterator
        ends when the server stops.
        """
        for records in self.tail_records(name, from_beginning):
            yield pd.DataFrame.from_records(records)

    def tail_records(self, name: str, from_beginning: bool = False
                     ) -> Iterator[list[dict[str, Any]]]:
        """``tail``'s records as the server sends them (JSON objects: a BIGINT stays an
        integer next to a null).
        """
        start = "?from=0" if from_beginning else ""
        with self._open("GET", f"/queries/{_q(name)}/stream{start}") as resp:
            event = ""
            try:
                for line in resp:
                    text = line.decode().rstrip("\n")
                    if text.startswith("event:"):
                        event = text[6:].strip()
                    elif text.startswith("data:"):
                        payload = json.loads(text[5:])
                        if event == "error":
                            raise ServerError(str(payload), 400, "")
                        yield payload
                    elif not text:
                        event = ""
            except (OSError, http.client.HTTPException) as e:
                msg = f"lost the connection to the sparkcq server at {self.url}: {e!r}"
                raise ServerError(msg, 0, "ConnectionError") from None

    def insert(self, table: str, rows: list[dict[str, Any]]) -> int:
        """Add rows to a table as its next version (``INSERT INTO``); how many."""
        return int(self._request("POST", f"/tables/{_q(table)}/rows",
                                 {"rows": rows})["inserted"])

    def push(self, stream: str, rows: Any, watermark: Any = None,
             end: bool = False, deletes: Any = None) -> dict[str, Any]:
        """Send rows (dicts or a pandas frame) to a memory-source stream, and to a keyed
        one ``deletes`` (each its key columns and event time). The answer: ``accepted``
        (rows that will be processed), ``deleted`` (deletes, when sent) and ``rejected``
        (index, column, reason of each row refused, ``delete`` true for a delete; those
        are kept as dead letters). A full queue raises ServerError with status 429: send
        the same push again later.
        """
        def records(given: Any) -> list[Any]:
            if isinstance(given, pd.DataFrame):
                return json.loads(given.to_json(orient="records", date_format="iso"))
            return list(given or [])

        body: dict[str, Any] = {"rows": records(rows), "watermark": watermark, "end": end}
        if deletes is not None:
            body["deletes"] = records(deletes)
        return self._request("POST", f"/streams/{_q(stream)}/rows", body)

    def feed(self, stream: str, messages: bytes, producer: str | None = None,
             arrow_seq: int | None = None) -> list[dict[str, Any]]:
        """Send feed messages over HTTP: NDJSON lines (``io/feed_protocol.py``), or with
        ``arrow_seq`` one Arrow IPC stream of rows (an INSERTION numbered ``arrow_seq``, 0:
        none); one answer per message. ``sparkcq.client.Feed`` is the TCP way, faster.
        """
        query = {k: v for k, v in (("producer", producer), ("seq", arrow_seq)) if v}
        path = f"/feed/{_q(stream)}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        kind = "application/vnd.apache.arrow.stream" if arrow_seq is not None \
            else "application/x-ndjson"
        return self._request("POST", path, messages, content_type=kind)["answers"]

    def dead_letters(self, stream: str, offset: int = 0) -> tuple[pd.DataFrame, int]:
        """A stream's dead letters after the first ``offset``: late events, rows refused
        at the door (with ``_raw``), each with its ``_reason``; and the offset to ask next.
        """
        out = self._request("GET", f"/streams/{_q(stream)}/dead-letters?offset={offset}")
        return pd.DataFrame.from_records(out["rows"]), out["offset"]

    def shutdown(self) -> None:
        """Stop the server: queries stop cleanly and Spark is released."""
        self._request("POST", "/shutdown")


def _refusal(e: urllib.error.HTTPError) -> ServerError:
    """The server's own error message for a refused request; what to do for a 401."""
    payload = e.read().decode(errors="replace")
    try:
        err = json.loads(payload)
    except json.JSONDecodeError:
        err = None
    if not isinstance(err, dict):
        return ServerError(payload or str(e), e.code, "")
    message, kind = str(err.get("error", payload)), str(err.get("kind", ""))
    if e.code == 401:
        message += ("; the server needs its API token: pass --token or set SPARKCQ_TOKEN "
                    "(Client(token=...) from Python)")
    return ServerError(message, e.code, kind)


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="")
