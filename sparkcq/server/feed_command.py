"""``sparkcq feed NAME FILE|-``: replay a CSV or JSON lines file (or stdin) into a feed
stream at a given rate, over the feed's TCP protocol (``sparkcq.client.Feed``).

The file is read as it is sent, never whole, so ``tail -f log.csv | sparkcq feed s -`` works.
A CSV's first line names the columns; its values are text, which the server converts to the
stream's types (``io/ingest.py``); an empty field is NULL. With ``--columns`` and
``--event-time`` the command sends the HEADER first.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from collections.abc import Iterator
from typing import Any

from rich.console import Console

from sparkcq.client import DEFAULT_FEED, Feed
from sparkcq.errors import SparkcqError
from sparkcq.server.commands import row_of_line


class FeedCommandError(SparkcqError, ValueError):
    """The file to feed cannot be read as rows."""


def add_feed_verb(sub: Any) -> None:
    """Register ``feed`` on the ``sparkcq`` argument parser's subparsers."""
    feed = sub.add_parser("feed", help="replay a CSV or JSON lines file (or -, stdin) into a "
                                       "feed stream of a server")
    feed.add_argument("stream", help="the feed stream's name")
    feed.add_argument("file", help="a .csv (first line: column names) or JSON lines file; "
                                   "- reads stdin")
    feed.add_argument("--rate", type=float, default=None, metavar="N",
                      help="rows per second (default: as fast as the server acknowledges)")
    feed.add_argument("--feed", default=None, metavar="HOST:PORT",
                      help=f"the server's feed (default SPARKCQ_FEED_HOST/PORT or "
                           f"{DEFAULT_FEED[0]}:{DEFAULT_FEED[1]})")
    feed.add_argument("--columns", default=None, metavar="DDL",
                      help="send a HEADER first: 'pid BIGINT, t TIMESTAMP, ...'")
    feed.add_argument("--event-time", default=None, metavar="COLUMN",
                      help="the HEADER's event time column (with --columns)")
    feed.add_argument("--option", action="append", default=[], metavar="NAME=VALUE",
                      help="another HEADER option: lateness, end_time, key, time_unit")
    feed.add_argument("--batch", type=int, default=1000, metavar="N",
                      help="rows per INSERTION message (default 1000)")
    feed.add_argument("--producer", default=None,
                      help="a stable producer name: a rerun after a break resends only what "
                           "the server does not hold")
    feed.add_argument("--token", default=None, help="the server's token (default SPARKCQ_TOKEN)")


def rows_of(path: str) -> Iterator[dict[str, Any]]:
    """The rows of a CSV or JSON lines file (or stdin), one at a time."""
    stream = sys.stdin if path == "-" else _open(path)
    lines = iter(stream)
    first = next((line for line in lines if line.strip()), None)
    if first is None:
        return
    if first.lstrip().startswith("{"):
        for number, line in enumerate(_chain(first, lines), start=1):
            if line.strip():
                yield row_of_line(line, number, path)
        return
    reader = csv.reader(_chain(first, lines))
    names = next(reader)
    for number, values in enumerate(reader, start=2):
        if not values:
            continue
        if len(values) != len(names):
            msg = (f"line {number} of {path} has {len(values)} fields; the first line names "
                   f"{len(names)}: {', '.join(names)}")
            raise FeedCommandError(msg)
        yield {n: (v if v != "" else None) for n, v in zip(names, values, strict=True)}


def _open(path: str) -> io.TextIOWrapper:
    try:
        return open(path, encoding="utf-8", newline="")  # noqa: SIM115 - read lazily
    except OSError as e:
        msg = f"cannot read {path!r}: {e.strerror or e}"
        raise FeedCommandError(msg) from None


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


def run_feed(args: argparse.Namespace, console: Console) -> int:
    """Send the file's rows; print what the server accepted and refused. Exit code 1 if it
    refused any row.
    """
    host, port = None, None
    if args.feed:
        host, _, port_text = args.feed.rpartition(":")
        if not port_text.isdigit():
            msg = f"--feed {args.feed!r} must be HOST:PORT"
            raise FeedCommandError(msg)
        port = int(port_text)
    options = {}
    for text in args.option:
        name, sep, value = text.partition("=")
        if not sep:
            msg = f"--option {text!r} must be NAME=VALUE"
            raise FeedCommandError(msg)
        options[name.strip()] = value.strip()
    batch = max(1, min(args.batch, int(args.rate / 10) or 1)) if args.rate else args.batch
    began = time.monotonic()
    sent = 0
    with Feed(args.stream, host or None, port, args.token, args.producer,
              batch_rows=batch) as feed:
        if args.columns:
            if not args.event_time:
                msg = "--columns needs --event-time: the column holding each row's event time"
                raise FeedCommandError(msg)
            answer = feed.header(args.columns, args.event_time, **options)
            console.out(f"{args.stream}: schema {answer['schema']} ({answer['change']})",
                        highlight=False)
        for row in rows_of(args.file):
            feed.send(row)
            sent += 1
            if args.rate:
                ahead = sent / args.rate - (time.monotonic() - began)
                if ahead > 0:
                    feed.flush()
                    time.sleep(ahead)
        stats = feed.close()
    seconds = time.monotonic() - began
    console.out(f"sent {sent:,} rows to {args.stream} in {seconds:.1f} s "
                f"({sent / seconds if seconds else 0:,.0f} rows/s): accepted {stats.accepted:,}, "
                f"refused {len(stats.rejected):,}, late {len(stats.late):,}", highlight=False)
    for refused in stats.rejected[:20] + stats.late[:20]:
        column = f", column {refused['column']!r}" if refused.get("column") else ""
        console.out(f"row {refused['row'] + 1}{column}: {refused['reason']}", highlight=False)
    for error in stats.errors[:20]:
        console.out(f"refused message: {error.get('error')}", highlight=False)
    return 1 if stats.rejected or stats.errors else 0
