"""The ``sparkcq`` command: run a script, the live demo, the server, and verbs that talk to it."""

from __future__ import annotations

import argparse
import os
import sys
import time
from importlib import resources

from rich.console import Console
from rich.text import Text

from sparkcq.class_archive import build as build_class_archive
from sparkcq.engine import Engine
from sparkcq.errors import SparkcqError
from sparkcq.heap import FrozenHeap
from sparkcq.plan.options import ShedMode
from sparkcq.server.commands import REMOTE_VERBS, add_remote_verbs, read_text, run_remote
from sparkcq.server.feed_command import add_feed_verb, run_feed

MASTER_HELP = "Spark master URL, e.g. spark://host:7077 (default: SPARKCQ_MASTER or local[*])"


def build_parser() -> argparse.ArgumentParser:
    """The ``sparkcq`` argument parser; ``--master`` goes before or after run/demo/serve."""
    parser = argparse.ArgumentParser(prog="sparkcq", description=__doc__)
    parser.add_argument("--master", help=MASTER_HELP)
    # the commands that start an engine take it after their name too; SUPPRESS keeps a
    # value given before the command when it is not repeated after it
    engine_options = argparse.ArgumentParser(add_help=False)
    engine_options.add_argument("--master", default=argparse.SUPPRESS, help=MASTER_HELP)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", parents=[engine_options],
                         help="execute a script of statements and print query results")
    run.add_argument("file", help="a .sql file of statements separated by semicolons")
    run.add_argument("--duration", type=float, default=None,
                     help="seconds to run (default: until input is idle, or Ctrl-C)")
    run.add_argument("--interval", type=float, default=1.0, help="seconds between cycles")
    demo = sub.add_parser("demo", parents=[engine_options],
                          help="road sensors and network packets, live")
    demo.add_argument("--duration", type=float, default=None, help="seconds to run")
    demo.add_argument("--rate", type=int, default=2000, help="events per second per stream")
    demo.add_argument("--interval", type=float, default=1.0, help="seconds between cycles")
    serve = sub.add_parser("serve", parents=[engine_options],
                           help="run the engine with its control API (HTTP/JSON)")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address the API, console and feed listen on (default "
                            "127.0.0.1; any other needs --token)")
    serve.add_argument("--port", type=int, default=8765,
                       help="HTTP port of the control API and the console (default 8765)")
    serve.add_argument("--interval", type=float, default=1.0, help="seconds between cycles")
    serve.add_argument("--token", default=os.environ.get("SPARKCQ_TOKEN"),
                       help="API token; required to bind beyond localhost")
    serve.add_argument("--allow-udf-module", action="append", default=[], metavar="MODULE",
                       help="a module or package CREATE AGGREGATE ... USING may load code "
                            "from (repeatable; sparkcq's own library is always allowed)")
    serve.add_argument("--data-root", action="append", default=[], metavar="DIR",
                       help="a folder tables, file sources and file sinks may use "
                            "(repeatable; no paths at all without one)")
    serve.add_argument("--database", action="append", default=[], metavar="NAME=URL",
                       help="a PostgreSQL database clients may name in tables and sinks "
                            "(database='NAME'); URL is postgresql://user:password@host:port/db "
                            "(repeatable; clients never see it)")
    serve.add_argument("--checkpoint", default=None, metavar="DIR",
                       help="checkpoint the catalog, state and input positions in DIR after "
                            "committed cycles; a restart with the same DIR resumes there")
    serve.add_argument("--checkpoint-every", type=int, default=1, metavar="N",
                       help="checkpoint every N cycles (the cycles between are redone from "
                            "their logged input after a crash; default 1)")
    serve.add_argument("--feed-port", type=int, default=8766, metavar="PORT",
                       help="TCP port of the feed (live sources, CONNECT/HEADER/INSERTION/"
                            "BOUNDARY/STOP/REMOVE as JSON lines or Arrow); 0: no listener")
    serve.add_argument("--spool", default=None, metavar="DIR",
                       help="feed streams write what they acknowledge to DIR first "
                            "(default: DIR/feed of --checkpoint; without either, nothing "
                            "acknowledged survives a crash)")
    serve.add_argument("--max-spool-bytes", type=int, default=2**30, metavar="N",
                       help="a feed stream's spool bound: beyond it acknowledgements wait "
                            "for cycles to take rows (default 1 GiB)")
    serve.add_argument("--shedding", choices=[m.value for m in ShedMode], default="off",
                       help="how windowed stream joins shed work when input outruns them, "
                            "for queries that do not say (WITH (shedding=...); default off)")
    serve.add_argument("--max-body-bytes", type=int, default=16 * 2**20, metavar="N",
                       help="largest request body (413 beyond; default 16 MiB)")
    serve.add_argument("--max-queued-rows", type=int, default=200_000, metavar="N",
                       help="rows a stream may hold before a cycle takes them; a push "
                            "beyond gets 429 with Retry-After (default 200,000)")
    serve.add_argument("--max-rows-per-cycle", type=int, default=100_000, metavar="N",
                       help="rows of one stream a cycle takes (default 100,000)")
    serve.add_argument("--retain-rows", type=int, default=100_000, metavar="N",
                       help="records kept per query for /results and tail (0: all; "
                            "default 100,000; a query may say WITH (retain_rows='n'))")
    serve.add_argument("--retain-seconds", type=float, default=None, metavar="S",
                       help="keep only records committed in the last S seconds")
    serve.add_argument("--stop-timeout", type=float, default=60.0, metavar="S",
                       help="bound of the clean stop on SIGTERM/SIGINT/shutdown (default 60)")
    archive = sub.add_parser("class-archive",
                             help="archive the JVM classes a Spark session loads, so sessions "
                                  "start sooner (once per Java and Spark version)")
    archive.add_argument("--force", action="store_true", help="build it again")
    add_remote_verbs(sub)
    add_feed_verb(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``sparkcq`` command."""
    args = build_parser().parse_args(argv)
    console = Console()
    try:
        if args.command == "serve":
            from sparkcq.server.serve import ServerConfig
            from sparkcq.server.serve import serve as run_server

            return run_server(ServerConfig(
                args.host, args.port, args.master, args.interval, args.token,
                tuple(args.allow_udf_module), tuple(args.data_root), args.max_body_bytes,
                args.max_queued_rows, args.max_rows_per_cycle, args.retain_rows or None,
                args.retain_seconds, args.stop_timeout,
                databases=tuple(_name_value(d, "--database") for d in args.database),
                checkpoint=args.checkpoint, checkpoint_every=args.checkpoint_every,
                feed_port=args.feed_port or None, spool=args.spool,
                max_spool_bytes=args.max_spool_bytes, shedding=ShedMode(args.shedding)))
        if args.command == "feed":
            return run_feed(args, console)
        if args.command == "class-archive":
            console.print(build_class_archive(args.force), highlight=False)
            return 0
        if args.command in REMOTE_VERBS:
            return run_remote(args, console)
        if args.command == "run":
            script = read_text(args.file)
            return run_script(script, args.master, args.duration, args.interval, console)
        return run_demo(args.master, args.duration, args.rate, args.interval, console)
    except SparkcqError as e:
        # as is, unwrapped: it quotes user text ('[RANGE 10]' is no markup) and underlines
        # places with carets that must stay under their line
        Console(stderr=True).print(Text.assemble(("error:", "bold red"), f" {e}"),
                                   highlight=False, soft_wrap=True)
        return 1
    except KeyboardInterrupt:
        console.print("stopped")
        return 130


def _name_value(text: str, option: str) -> tuple[str, str]:
    """``NAME=VALUE`` of a command-line option, split; SparkcqError if there is no '='."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        msg = f"{option} takes NAME=VALUE, got {text.split('://')[0]!r}..."
        raise SparkcqError(msg)
    return name, value


def run_script(script: str, master: str | None, duration: float | None, interval: float,
               console: Console) -> int:
    """Execute ``script``; queries print to the console unless they name another sink.

    Trusted: whoever runs a local script already has this machine's files and programs, so
    its SQL may call any function and name any path (unlike a server's clients).
    """
    eng = Engine(master=master, trusted=True)
    eng.register_sink("memory", eng.sinks["console"])
    eng.execute(script)
    loop(eng, duration, interval, console, stop_when_idle=duration is None)
    eng.stop()
    return 0


def start_demo(eng: Engine, rate: int, batch: int | None = None) -> None:
    """The demo's table, streams and queries in ``eng``, generating ``rate`` events per
    second of event time; with ``batch``, that many per cycle as fast as Spark goes instead
    of at the wall clock's pace (a test's minute of event time in seconds).
    """
    eng.register_table("hosts", [{"ip": f"ip_{i}", "host": f"host-{chr(97 + i)}"}
                                 for i in range(8)])
    script = resources.files("sparkcq").joinpath("demo.sql").read_text(encoding="utf-8")
    generator = f"rate='{rate}'" + (f", pace='fast', batch='{batch}'" if batch else "")
    eng.execute(script.replace("rate='{rate}'", generator).replace("{rate}", str(rate)))


DEMO_LEGEND = ("each row holds over event time [_ts, _te): _te '-' is still open; _op I is a "
               "new row, C closes one given open earlier (docs/output.md)")


def run_demo(master: str | None, duration: float | None, rate: int, interval: float,
             console: Console) -> int:
    """The main job: generated road-sensor readings and packets, six continuous queries."""
    eng = Engine(master=master, trusted=True)  # our own script, run by a local user
    start_demo(eng, rate)
    console.print("[bold]sparkcq demo[/]: queries " + ", ".join(eng.catalog.queries))
    console.print(DEMO_LEGEND, highlight=False)
    loop(eng, duration, interval, console, stop_when_idle=False)
    eng.stop()
    return 0


def loop(eng: Engine, duration: float | None, interval: float, console: Console,
         stop_when_idle: bool) -> None:
    """Run cycles, printing a status line per cycle: rows in, rows/s, cycle latency.

    The engine's long-lived objects are kept out of Python's full collections while it
    runs (``heap.py``): each such collection otherwise pauses a cycle for 70-110 ms.
    """
    deadline = None if duration is None else time.monotonic() + duration
    total, began = 0, time.monotonic()
    heap = FrozenHeap()
    try:
        while deadline is None or time.monotonic() < deadline:
            if stop_when_idle and not eng.has_pending_input():
                break
            start = time.monotonic()
            report = eng.run_cycle()
            total += report.rows_in
            elapsed = time.monotonic() - began
            m = eng.metrics()
            console.print(
                f"[dim]cycle {report.cycle}: {report.rows_in} rows in {report.seconds:.2f} s "
                f"({report.rows_in / max(report.seconds, 1e-9):,.0f} rows/s; "
                f"{total / max(elapsed, 1e-9):,.0f} rows/s overall), "
                f"state rows {m['total_state_rows']:,}, dead letters "
                f"{sum(m['dead_letters'].values())}[/]", highlight=False)
            heap.after_cycle()
            rest = interval - (time.monotonic() - start)
            if rest > 0:
                time.sleep(rest)
    finally:
        heap.release()


if __name__ == "__main__":
    sys.exit(main())
