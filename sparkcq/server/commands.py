"""CLI verbs that talk to a running server: submit, drop, ls, explain, logs, tail, status."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from sparkcq.errors import SparkcqError
from sparkcq.language.query_text import LANGUAGES, query_statement
from sparkcq.model.time import TimeKind, show_instant
from sparkcq.server.client import Client


def add_remote_verbs(sub: Any) -> None:
    """Register the verbs on the ``sparkcq`` argument parser's subparsers."""
    submit = sub.add_parser("submit", help="execute a statement (or a .sql file) on the server, "
                            "or start a StreamAPAS query (--language apas)")
    submit.add_argument("statement", help="SQL text, or the path of a script; with "
                        "--language apas a StreamAPAS query, or the path of its file")
    submit.add_argument("--language", choices=LANGUAGES, default="sql",
                        help="apas: the text is a StreamAPAS query (docs/apas.md)")
    submit.add_argument("--name", default=None, help="the StreamAPAS query's name (default: "
                        "its file's name without the extension)")
    drop = sub.add_parser("drop", help="drop a query on the server")
    drop.add_argument("name", help="the query's name")
    sub.add_parser("ls", help="streams, tables, functions, aggregates and queries on the server")
    explain = sub.add_parser("explain", help="a query's plan, or the global plan")
    explain.add_argument("name", nargs="?", help="the query's name (none: the global plan)")
    explain.add_argument("--global", dest="glob", action="store_true", help="the shared DAG")
    explain.add_argument("--dot", action="store_true", help="Graphviz DOT (with --global)")
    logs = sub.add_parser("logs", help="a query's log")
    logs.add_argument("name", help="the query's name")
    tail = sub.add_parser("tail", help="print a query's results live")
    tail.add_argument("name", help="the query's name")
    tail.add_argument("--from-beginning", action="store_true",
                      help="start with the records the server still keeps, not the next ones")
    tail.add_argument("--json", action="store_true",
                      help="one JSON object per record and line (for jq and other programs)")
    sub.add_parser("status", help="cycles, latency and query counts of the server")
    push = sub.add_parser("push", help="send rows (a JSON lines file) to a memory stream")
    push.add_argument("stream", help="the memory stream's name")
    push.add_argument("file", help="a JSON lines file, a row per line")
    push.add_argument("--watermark", default=None,
                      help="the stream's watermark after these rows: a number, or a time "
                           "for a TIMESTAMP stream")
    push.add_argument("--end", action="store_true",
                      help="the stream ends after these rows (its windows close)")
    for p in (submit, drop, explain, logs, tail, push, sub.choices["ls"], sub.choices["status"]):
        p.add_argument("--server", default=None, help="server URL (default SPARKCQ_SERVER or "
                       "http://127.0.0.1:8765)")
        p.add_argument("--token", default=None, help="API token (default SPARKCQ_TOKEN)")


REMOTE_VERBS = ("submit", "drop", "ls", "explain", "logs", "tail", "status", "push")


class CommandError(SparkcqError, ValueError):
    """A verb's own input is unusable (a file that cannot be read, a line that is not a row)."""


def run_remote(args: argparse.Namespace, console: Console) -> int:
    """Carry out one remote verb; text from the server is printed as is (no rich markup)."""
    client = Client(args.server, args.token)
    verb = args.command
    if verb == "submit":
        text = args.statement
        name = args.name
        if os.path.isfile(text):
            name = name or os.path.splitext(os.path.basename(text))[0]
            text = read_text(text)
        elif _looks_like_a_path(text):
            msg = f"no such file {text!r}; give the path of a .sql script or the SQL itself"
            raise CommandError(msg)
        if args.language == "apas":
            if not name:
                msg = "a StreamAPAS query needs a name: give --name NAME (or a file)"
                raise CommandError(msg)
            text, _ = query_statement(name, text, "apas", {})
        result = client.submit(text)
        if isinstance(result, list):
            print_records(console, "result", result)
        elif result is not None:
            console.out(str(result), highlight=False)
    elif verb == "drop":
        client.drop(args.name)
        console.out(f"dropped {args.name}", highlight=False)
    elif verb == "ls":
        streams = [readable_watermark(row) for row in client.streams()]
        for title, rows in (("streams", streams), ("tables", client.tables()),
                            ("functions", client.functions()),
                            ("aggregates", client.aggregates()), ("queries", client.queries())):
            print_records(console, title, rows)
    elif verb == "explain":
        console.out(client.explain(args.name, args.glob or args.name is None,
                                   "dot" if args.dot else "text"), highlight=False)
    elif verb == "logs":
        for line in client.logs(args.name):
            console.out(line, highlight=False)
    elif verb == "tail":
        for records in client.tail_records(args.name, from_beginning=args.from_beginning):
            if args.json:
                for record in records:
                    console.out(json.dumps(record), highlight=False)
            else:
                print_records(console, args.name, records)
            console.file.flush()  # each cycle's records as they come, also into a pipe
    elif verb == "status":
        for key, value in client.status().items():
            console.out(f"{key}: {value}", highlight=False)
    elif verb == "push":
        rows = read_rows(args.file)
        wm = args.watermark
        watermark = int(wm) if wm is not None and wm.lstrip("-").isdigit() else wm
        answer = client.push(args.stream, rows, watermark, args.end)
        console.out(f"pushed {answer['accepted']} rows to {args.stream}", highlight=False)
        for refused in answer["rejected"]:  # the file's lines count from 1
            column = f", column {refused['column']!r}" if refused["column"] else ""
            console.out(f"refused row {refused['index'] + 1}{column}: {refused['reason']}",
                        highlight=False)
        for late in answer.get("late", []):
            console.out(f"late row {late['index'] + 1}: {late['reason']} (kept as a dead "
                        "letter)", highlight=False)
        if answer.get("late_rows", 0) > len(answer.get("late", [])):
            console.out(f"{answer['late_rows']:,} late rows in all", highlight=False)
        if answer["rejected"] or answer.get("late_rows"):
            return 1
    return 0


def readable_watermark(stream: dict[str, Any]) -> dict[str, Any]:
    """A stream's row of ``ls`` with its watermark as a user reads it ("none yet", "+inf",
    a UTC time) instead of the number on the engine's time axis.
    """
    at = stream.get("watermark")
    kind = TimeKind(stream.get("time_kind") or TimeKind.NUMERIC.value)
    shown = {**stream, "watermark": None if at is None else show_instant(int(at), kind)}
    shown.pop("time_kind", None)
    return shown


def read_text(path: str) -> str:
    """A file's text; a CommandError naming the file when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        msg = f"cannot read {path!r}: {e.strerror or e}"
        raise CommandError(msg) from None
    except UnicodeDecodeError as e:
        msg = f"{path!r} is not UTF-8 text: {e.reason} at byte {e.start}"
        raise CommandError(msg) from None


def read_rows(path: str) -> list[dict[str, Any]]:
    """The rows of a JSON lines file, one object a line (blank lines skipped).

    A line that is not a JSON object is refused with its number, so nothing is pushed from a
    file with a mistake in it.
    """
    rows = []
    for number, line in enumerate(read_text(path).split("\n"), start=1):  # not \u2028
        if line.strip():
            rows.append(row_of_line(line, number, path))
    return rows


def row_of_line(line: str, number: int, path: str) -> dict[str, Any]:
    """One line of a JSON lines file as a row; CommandError says which line is wrong."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        msg = f"line {number} of {path} is not JSON: {e.msg} at col {e.colno}"
        raise CommandError(msg) from None
    if not isinstance(row, dict):
        msg = (f"line {number} of {path} is not a JSON object: it is a "
               f"{_JSON_KINDS.get(type(row), type(row).__name__)}; each line must be one "
               'row like {"k": "a", "t": 1}')
        raise CommandError(msg)
    return row


_JSON_KINDS = {list: "list", str: "string", int: "number", float: "number", bool: "boolean",
               type(None): "null"}


def _looks_like_a_path(text: str) -> bool:
    """Whether ``submit``'s argument was meant as a script's path rather than SQL."""
    return (not any(ch.isspace() for ch in text)
            and (text.lower().endswith((".sql", ".apas")) or os.sep in text))


def print_records(console: Console, title: str, rows: list[dict[Any, Any]]) -> None:
    """Rows as a rich table (or a note that there are none); cells are shown as they are."""
    if not rows:
        console.print(Text(f"{title}: none", style="dim"))
        return
    table = Table(title=Text(title))
    for column in rows[0]:
        table.add_column(Text(str(column)))
    for row in rows:
        table.add_row(*[Text("" if v is None else str(v)) for v in row.values()])
    console.print(table)
