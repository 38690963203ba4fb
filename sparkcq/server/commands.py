"""CLI verbs that talk to a running server: submit, drop, ls, explain, logs, tail, status."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rich.console import Console
from rich.table import Table

from sparkcq.server.client import Client


def add_remote_verbs(sub: Any) -> None:
    """Register the verbs on the ``sparkcq`` argument parser's subparsers."""
    submit = sub.add_parser("submit", help="execute a statement (or a .sql file) on the server")
    submit.add_argument("statement", help="SQL text, or the path of a script")
    drop = sub.add_parser("drop", help="drop a query on the server")
    drop.add_argument("name")
    sub.add_parser("ls", help="streams, tables, functions, aggregates and queries on the server")
    explain = sub.add_parser("explain", help="a query's plan, or the global plan")
    explain.add_argument("name", nargs="?")
    explain.add_argument("--global", dest="glob", action="store_true", help="the shared DAG")
    explain.add_argument("--dot", action="store_true", help="Graphviz DOT (with --global)")
    logs = sub.add_parser("logs", help="a query's log")
    logs.add_argument("name")
    tail = sub.add_parser("tail", help="print a query's results live")
    tail.add_argument("name")
    sub.add_parser("status", help="cycles, latency and query counts of the server")
    push = sub.add_parser("push", help="send rows (a JSON lines file) to a memory stream")
    push.add_argument("stream")
    push.add_argument("file")
    push.add_argument("--watermark", default=None)
    push.add_argument("--end", action="store_true")
    for p in (submit, drop, explain, logs, tail, push, sub.choices["ls"], sub.choices["status"]):
        p.add_argument("--server", default=None, help="server URL (default SPARKCQ_SERVER or "
                       "http://127.0.0.1:8765)")
        p.add_argument("--token", default=None, help="API token (default SPARKCQ_TOKEN)")


REMOTE_VERBS = ("submit", "drop", "ls", "explain", "logs", "tail", "status", "push")


def run_remote(args: argparse.Namespace, console: Console) -> int:
    """Carry out one remote verb."""
    client = Client(args.server, args.token)
    verb = args.command
    if verb == "submit":
        text = args.statement
        if os.path.isfile(text):
            with open(text, encoding="utf-8") as f:
                text = f.read()
        result = client.submit(text)
        if isinstance(result, list):
            print_records(console, "result", result)
        elif result is not None:
            console.print(result, highlight=False)
    elif verb == "drop":
        client.drop(args.name)
        console.print(f"dropped {args.name}")
    elif verb == "ls":
        for title, rows in (("streams", client.streams()), ("tables", client.tables()),
                            ("functions", client.functions()),
                            ("aggregates", client.aggregates()), ("queries", client.queries())):
            print_records(console, title, rows)
    elif verb == "explain":
        console.print(client.explain(args.name, args.glob or args.name is None,
                                     "dot" if args.dot else "text"), highlight=False)
    elif verb == "logs":
        for line in client.logs(args.name):
            console.print(line, highlight=False)
    elif verb == "tail":
        for frame in client.tail(args.name):
            print_records(console, args.name, frame.to_dict("records"))
    elif verb == "status":
        for key, value in client.status().items():
            console.print(f"{key}: {value}", highlight=False)
    elif verb == "push":
        with open(args.file, encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
        wm = args.watermark
        watermark = int(wm) if wm is not None and wm.lstrip("-").isdigit() else wm
        n = client.push(args.stream, rows, watermark, args.end)
        console.print(f"pushed {n} rows to {args.stream}")
    return 0


def print_records(console: Console, title: str, rows: list[dict[Any, Any]]) -> None:
    """Rows as a rich table (or a note that there are none)."""
    if not rows:
        console.print(f"[dim]{title}: none[/]")
        return
    table = Table(title=title)
    for column in rows[0]:
        table.add_column(str(column))
    for row in rows:
        table.add_row(*["" if v is None else str(v) for v in row.values()])
    console.print(table)
