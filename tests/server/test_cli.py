"""The ``sparkcq`` command as a user meets it: one-line errors, server text shown as is,
EXPLAIN GLOBAL DOT that Graphviz reads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import socket
import subprocess
import sys
import urllib.request

import pytest
from rich.console import Console
from served import free_port, start_server, wait_for

from sparkcq.cli import build_parser, main
from sparkcq.plan.labels import user_labels
from sparkcq.runtime.explain import _quote
from sparkcq.server.client import ServerError
from sparkcq.server.commands import print_records

TOKEN = "cli-test-token"

# -- a strict reader of the DOT we emit ------------------------------------------------------
# Stricter than Graphviz: inside quotes a backslash must start one of \" \\ \n \l \r (so a
# stray escape such as json's \u00e9 is refused, where Graphviz would print it literally),
# no control characters, node ids declared once, edges only between declared nodes.
_TOKEN = re.compile(r"""
    (?P<space>\s+|//[^\n]*|/\*.*?\*/)
  | (?P<string>"(?:[^"\\\x00-\x1f]|\\["\\nlr])*")
  | (?P<arrow>->|--)
  | (?P<id>[A-Za-z_\x80-\U0010ffff][A-Za-z_0-9\x80-\U0010ffff]*)
  | (?P<number>-?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?))
  | (?P<punct>[{}\[\];,=:])
""", re.VERBOSE | re.DOTALL)
_KEYWORDS = {"node", "edge", "graph", "digraph", "subgraph", "strict"}
_ESCAPES = {'"': '"', "\\": "\\", "n": "\n", "l": "\n", "r": "\n"}


class DotError(AssertionError):
    pass


def dot_tokens(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            line = text.count("\n", 0, pos) + 1
            raise DotError(f"line {line}: cannot read {text[pos:pos + 30]!r}")
        if m.lastgroup != "space":
            tokens.append((m.lastgroup, m.group()))
        pos = m.end()
    return tokens


class DotGraph:
    """Parse ``digraph ID { stmt* }``; ``nodes`` maps id -> attributes (strings decoded)."""

    def __init__(self, text: str):
        self.tokens = dot_tokens(text)
        self.pos = 0
        self.nodes: dict[str, dict[str, str]] = {}
        self.edges: list[tuple[str, str]] = []
        self.graph()
        for a, b in self.edges:
            for end in (a, b):
                if end not in self.nodes:
                    raise DotError(f"edge {a} -> {b} names undeclared node {end!r}")

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else ("end", "")

    def next(self) -> tuple[str, str]:
        tok = self.peek()
        if tok[0] == "end":
            raise DotError("the graph ends too early")
        self.pos += 1
        return tok

    def expect(self, value: str) -> None:
        tok = self.next()
        if tok[1] != value:
            raise DotError(f"expected {value!r}, found {tok[1]!r}")

    def ident(self) -> str:
        kind, value = self.next()
        if kind == "string":
            return re.sub(r"\\(.)", lambda m: _ESCAPES[m[1]], value[1:-1])
        if kind == "number" or (kind == "id" and value.lower() not in _KEYWORDS):
            return value
        raise DotError(f"expected an ID, found {value!r}")

    def graph(self) -> None:
        self.expect("digraph")
        if self.peek()[1] != "{":
            self.ident()
        self.expect("{")
        while self.peek()[1] != "}":
            self.statement()
            if self.peek()[1] == ";":
                self.next()
        self.expect("}")
        if self.peek()[0] != "end":
            raise DotError(f"text after the graph: {self.peek()[1]!r}")

    def statement(self) -> None:
        kind, value = self.peek()
        if kind == "id" and value.lower() in ("node", "edge", "graph"):
            self.next()
            if self.peek()[1] != "[":
                raise DotError(f"{value} needs an attribute list")
            self.attributes()
            return
        name = self.ident()
        if self.peek()[1] == "=":
            self.next()
            self.ident()
            return
        if self.peek()[0] == "arrow":
            while self.peek()[0] == "arrow":
                if self.next()[1] != "->":
                    raise DotError("'--' in a digraph")
                target = self.ident()
                self.edges.append((name, target))
                name = target
            if self.peek()[1] == "[":
                self.attributes()
            return
        if name in self.nodes:
            raise DotError(f"node {name!r} is declared twice")
        self.nodes[name] = self.attributes() if self.peek()[1] == "[" else {}

    def attributes(self) -> dict[str, str]:
        attrs: dict[str, str] = {}
        while self.peek()[1] == "[":
            self.next()
            while self.peek()[1] != "]":
                key = self.ident()
                self.expect("=")
                attrs[key] = self.ident()
                if self.peek()[1] in (",", ";"):
                    self.next()
            self.next()
        return attrs


@pytest.mark.parametrize(
    ("dot", "problem"),
    [
        ('digraph g { a [label="x\\u00e9"]; }', "cannot read"),
        ('digraph g { a [label="say "hi""]; }', "expected"),
        ("digraph g { a; a; }", "declared twice"),
        ("digraph g { a -> b; a; }", "undeclared node 'b'"),
        ("digraph g { a -- a; }", "'--' in a digraph"),
        ('digraph g { a [label="one\ntwo"]; }', "cannot read"),
        ("digraph g { node; }", "needs an attribute list"),
        ("digraph g { a }  b", "text after the graph"),
    ],
    ids=["json-escape", "bare-quote", "duplicate-id", "undeclared", "undirected",
         "raw-newline", "node-without-attrs", "trailing"],
)
def test_the_dot_reader_is_strict(dot, problem):
    with pytest.raises(DotError, match=re.escape(problem)):
        DotGraph(dot)


@pytest.mark.parametrize(
    "text",
    ['q "x" [a] \\ <b>', "two\nlines\r\nthree", "\\n is not a line break", "é ü 漢",
     "tab\tbell\a{}|<>"],
    ids=["quotes-brackets", "line-breaks", "backslash-n", "unicode", "controls"],
)
def test_quote_gives_a_dot_string_that_reads_back_as_written(text):
    graph = DotGraph(f"digraph g {{ a [label={_quote(text)}]; }}")
    want = re.sub(r"\r\n|\r", "\n", text).replace("\t", " ").replace("\a", " ")
    assert graph.nodes["a"]["label"] == want


def test_explain_global_dot_shows_predicates_as_written(engine):
    engine.execute("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    predicate = "k <> 'a\"b\\\\n[c]<d>\\né' AND v > 1"
    for name in ("q_1", "q_2"):
        engine.execute(f"CREATE QUERY {name} AS SELECT k FROM s WHERE {predicate}")
    engine.execute("CREATE QUERY q2 AS SELECT k, count(*) AS n FROM s [RANGE 10] GROUP BY k")
    graph = DotGraph(engine.explain_global("dot"))
    labels = {node: attrs["label"] for node, attrs in graph.nodes.items()}
    # every operator's label starts with its EXPLAIN text, exactly, in the user's words
    shown = user_labels(engine.plan.ops)
    for i, node in enumerate(engine.plan.ops):
        assert labels[f"n{i}"].startswith(f"#{i} {shown.get(node) or node.label()}\nrefs=")
    assert any("SlicedAggregate count(*) AS n BY k <- Window [RANGE 10]\n" in label
               for label in labels.values())
    assert any("'a\"b\\\\n[c]<d>\\né'" in label for label in labels.values())
    # each query is its own node, named as written
    queries = sorted(label for node, label in labels.items() if node.startswith("q"))
    assert queries == ["q2", "q_1", "q_2"]


def test_records_are_shown_as_they_are(capsys):
    print_records(Console(width=200), "t [1]", [{"a [b]": "[bold]x[/]", "c": None}])
    out = capsys.readouterr().out
    assert "t [1]" in out and "a [b]" in out and "[bold]x[/]" in out


# -- errors a user meets without a server ------------------------------------------------------
@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("SPARKCQ_TOKEN", raising=False)
    monkeypatch.delenv("SPARKCQ_SERVER", raising=False)
    monkeypatch.setenv("COLUMNS", "200")  # rich tables unwrapped


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"k": "a", "t": 1}', "", '{"k": "a" "t": 2}'],
         "line 3 of {path} is not JSON: Expecting ',' delimiter at col 11"),
        (['{"k": "a", "t": 1}', '[1, 2]'],
         "line 2 of {path} is not a JSON object: it is a list"),
        (["{\"k\": 'a'}"], "line 1 of {path} is not JSON: Expecting value at col 7"),
    ],
    ids=["bad-json", "not-an-object", "single-quotes"],
)
def test_push_names_the_bad_line(capsys, tmp_path, no_env, lines, message):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run_cli(capsys, "push", "s", str(path), "--server",
                             f"http://127.0.0.1:{free_port()}")
    assert code == 1 and out == ""
    assert one_error_line(err).startswith("error: " + message.format(path=path))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["push", "s", "{tmp}/missing.jsonl"], "cannot read '{tmp}/missing.jsonl': No such file"),
        (["submit", "{tmp}/missing.sql"], "no such file '{tmp}/missing.sql'"),
        (["push", "s", "{tmp}"], "cannot read '{tmp}': Is a directory"),
        (["status"], "cannot reach the sparkcq server at http://127.0.0.1:{port}"),
        (["ls", "--server", "localhost:8765"], "'localhost:8765' is not a server URL"),
    ],
    ids=["push-missing-file", "submit-missing-file", "push-a-folder", "unreachable",
         "not-a-url"],
)
def test_input_and_connection_errors_are_one_line(capsys, tmp_path, no_env, argv, message):
    port = free_port()
    argv = [a.format(tmp=tmp_path) for a in argv]
    if "--server" not in argv:
        argv += ["--server", f"http://127.0.0.1:{port}"]
    code, _, err = run_cli(capsys, *argv)
    assert code == 1
    assert message.format(tmp=tmp_path, port=port) in one_error_line(err)


def test_run_with_a_missing_script(capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", str(tmp_path / "nope.sql"))
    assert code == 1 and "cannot read" in one_error_line(err)


@pytest.mark.parametrize(("argv", "master"), [
    (["serve", "--master", "spark://h:7077"], "spark://h:7077"),
    (["--master", "spark://h:7077", "serve"], "spark://h:7077"),
    (["--master", "spark://a:1", "run", "--master", "spark://b:2", "f.sql"], "spark://b:2"),
    (["demo", "--master", "local[2]"], "local[2]"),
    (["demo"], None),  # Engine falls back to SPARKCQ_MASTER, then local[*]
], ids=["after-serve", "before-serve", "after-wins", "demo", "none"])
def test_master_goes_before_or_after_the_command(argv, master):
    assert build_parser().parse_args(argv).master == master


# -- against a server ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    served = start_server(tmp_path_factory.mktemp("cli"), token=TOKEN)
    client = served.client
    client.submit("CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t')")
    client.submit("CREATE QUERY min_v AS SELECT k, min(v) AS a FROM s [RANGE 10] GROUP BY k")
    client.submit("CREATE QUERY max_v AS SELECT k, max(v) AS m FROM s [RANGE 10] "
                  "GROUP BY k")
    client.submit("CREATE QUERY fresh AS ISTREAM SELECT k FROM s [NOW] WHERE k <> '[x]'")
    yield served
    served.stop()


def remote(served, *argv: str, token: str | None = TOKEN) -> list[str]:
    return [*argv, "--server", f"http://127.0.0.1:{served.port}",
            *(["--token", token] if token else [])]


def brackets(text: str) -> list[str]:
    return re.findall(r"\[[^\]\n]*\]", text)


@pytest.mark.slow
def test_explain_global_prints_the_servers_text(capsys, served, no_env):
    code, out, _ = run_cli(capsys, *remote(served, "explain", "--global"))
    assert code == 0
    want = served.client.explain(global_=True)
    # the figures move with each cycle, and a node's rows turn to "fused" once its
    # query's first cycle is behind it (the server cycles between the two requests); the
    # rest, every '[...]' included, is the same
    assert brackets(out) == brackets(want) and "[stream]" in out
    assert "queries=[max_v, min_v]" in out
    rows = re.compile(r"rows/cycle=(fused|inline|\d+ \(avg [\d.]+\))")
    same = re.compile(r"\d+(\.\d+)?")
    assert (same.sub("N", rows.sub("rows/cycle=R", out.rstrip("\n")))
            == same.sub("N", rows.sub("rows/cycle=R", want)))


@pytest.mark.slow
def test_explain_global_dot_is_valid(capsys, served, no_env):
    code, out, _ = run_cli(capsys, *remote(served, "explain", "--global", "--dot"))
    assert code == 0
    graph = DotGraph(out)
    queries = {attrs["label"] for node, attrs in graph.nodes.items()
               if attrs.get("shape") == "ellipse"}
    assert queries == {"min_v", "max_v", "fresh"}
    assert any("Window [RANGE 10]" in attrs["label"] for attrs in graph.nodes.values())


@pytest.mark.slow
def test_server_text_keeps_its_brackets(capsys, served, no_env):
    code, out, _ = run_cli(capsys, *remote(served, "explain", "max_v"))
    assert code == 0 and out.rstrip("\n") == served.client.explain("max_v")
    code, out, _ = run_cli(capsys, *remote(served, "submit", "EXPLAIN fresh"))
    assert code == 0 and out.rstrip("\n") == served.client.explain("fresh")
    assert "Filter k <> '[x]'  [relation]" in out
    code, out, _ = run_cli(capsys, *remote(served, "logs", "max_v"))
    assert code == 0 and out.splitlines() == served.client.logs("max_v")
    code, out, _ = run_cli(capsys, *remote(served, "ls"))
    assert code == 0 and "│ max_v │ running │" in out


@pytest.mark.slow
def test_tail_and_drop_of_an_unknown_query(capsys, served, no_env):
    for verb in ("tail", "drop", "logs", "explain"):
        code, _, err = run_cli(capsys, *remote(served, verb, "nosuch"))
        assert code == 1
        assert one_error_line(err).startswith("error: unknown query 'nosuch'"), verb


@pytest.mark.slow
def test_a_wrong_token_says_how_to_give_it(capsys, served, no_env):
    for token in (None, "wrong"):
        code, _, err = run_cli(capsys, *remote(served, "status", token=token))
        assert code == 1
        line = one_error_line(err)
        assert "missing or wrong token" in line and "--token or set SPARKCQ_TOKEN" in line


@pytest.mark.slow
def test_push_and_a_failing_script(capsys, served, no_env, tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [{"k": "a", "v": 1.0, "t": 1},
                                                       {"k": "b", "v": 2.0, "t": 2}]))
    code, out, _ = run_cli(capsys, *remote(served, "push", "s", str(path), "--watermark", "3"))
    assert code == 0 and out == "pushed 2 rows to s\n"
    script = tmp_path / "two.sql"
    script.write_text("CREATE STREAM s2 (k STRING, t BIGINT) WITH (event_time='t');\n"
                      "CREATE QUERY q2 AS SELECT nope FROM s2;\n")
    code, _, err = run_cli(capsys, *remote(served, "submit", str(script)))
    assert code == 1
    assert "statement 2 of 2 (line 2: CREATE QUERY q2" in err and "not applied" in err
    assert "s2" not in {s["name"] for s in served.client.streams()}


@pytest.mark.slow
def test_tail_from_the_beginning_reaches_a_pipe_record_by_record(served, tmp_path):
    """``sparkcq tail --from-beginning --json`` into a pipe: the kept records come at once,
    one JSON object a line, a BIGINT end an integer (a null one null), not at exit.
    """
    client = served.client
    client.submit("CREATE STREAM piped (k STRING, n BIGINT, t BIGINT) WITH (event_time='t')")
    client.submit("CREATE QUERY piped_n AS SELECT k, max(n) AS n FROM piped [RANGE 5] "
                  "GROUP BY k")
    client.push("piped", [{"k": "a", "n": 7, "t": 1}, {"k": "a", "n": None, "t": 2}],
                watermark=20)
    wait_for(lambda: len(client.results("piped_n")[0]) >= 1 or None)
    env = {**os.environ, "SPARKCQ_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sparkcq.cli", "tail", "piped_n", "--from-beginning", "--json",
         "--server", f"http://127.0.0.1:{served.port}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            assert sel.select(timeout=60), "no line reached the pipe"
        records = [json.loads(proc.stdout.readline()) for _ in range(2)]
    finally:
        proc.kill()
        proc.wait(30)
    assert records == [{"k": "a", "n": 7, "_ts": 1, "_te": 6, "_op": "I"},
                       {"k": "a", "n": None, "_ts": 6, "_te": 7, "_op": "I"}]


@pytest.mark.slow
def test_push_tells_late_rows_at_once(capsys, served, no_env, tmp_path):
    served.client.submit("CREATE STREAM tardy (k STRING, t BIGINT) WITH (event_time='t')")
    answer = served.client.push("tardy", [{"k": "a", "t": 10}], watermark=10)
    assert (answer["accepted"], answer["late"], answer["late_rows"]) == (1, [], 0)
    path = tmp_path / "late.jsonl"
    path.write_text('{"k": "b", "t": 12}\n{"k": "c", "t": 4}\n')
    code, out, _ = run_cli(capsys, *remote(served, "push", "tardy", str(path)))
    assert code == 1
    assert out.splitlines() == [
        "pushed 1 rows to tardy",
        "late row 2: late: event time 4 is before the stream's watermark 10 (kept as a dead "
        "letter)"]


@pytest.mark.slow
def test_a_client_fills_a_table_over_http(served):
    client = served.client
    client.submit("CREATE TABLE regions (k STRING, region STRING)")
    assert client.insert("regions", [{"k": "a", "region": "north"}]) == 1
    assert client.submit("INSERT INTO regions VALUES ('b', 'south')") == 1
    with pytest.raises(ServerError) as err:
        client.insert("regions", [{"k": "c", "region": ["x"]}])
    assert err.value.status == 400 and "row 1, column 'region': a list is not text" in str(
        err.value)
    with pytest.raises(ServerError) as err:
        client.insert("nosuch", [{"k": "c"}])
    assert "unknown table 'nosuch'" in str(err.value)
    (row,) = [t for t in client.tables() if t["name"] == "regions"]
    assert row["version"] == 2  # created empty, then two inserts


def results_json(served, query: str) -> dict:
    """``GET /queries/<query>/results`` as the server wrote it."""
    request = urllib.request.Request(f"http://127.0.0.1:{served.port}/queries/{query}/results",
                                     headers={"Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_results_keep_integers_and_say_through_when_they_are_final(served):
    """An open element's ``_te`` is null; the page's ``watermark`` says through when the
    output is final, ``+inf`` once the input ended (an open element then never ends).
    """
    client = served.client
    client.submit("CREATE STREAM kept (k STRING, n BIGINT, t BIGINT) WITH (event_time='t')")
    client.submit("CREATE QUERY kept_all AS SELECT k, n FROM kept [UNBOUNDED] WHERE n > 0")
    client.push("kept", [{"k": "a", "n": 5, "t": 3}], watermark=10)
    page = wait_for(lambda: (lambda p: p if p["rows"] else None)(results_json(served,
                                                                             "kept_all")))
    assert page["rows"] == [{"k": "a", "n": 5, "_ts": 3, "_te": None, "_op": "I"}]
    assert page["watermark"] == 10
    client.push("kept", [], end=True)
    ended = wait_for(lambda: (lambda p: p if p["watermark"] == "+inf" else None)(
        results_json(served, "kept_all")))
    assert ended["rows"] == page["rows"]  # still open: valid from 3 on, for ever


@pytest.mark.slow
def test_ls_shows_watermarks_as_a_user_reads_them(capsys, served, no_env):
    served.client.submit("CREATE STREAM quiet (k STRING, t BIGINT) WITH (event_time='t')")
    served.client.submit("CREATE STREAM moved (k STRING, t TIMESTAMP) WITH (event_time='t')")
    served.client.push("moved", [], watermark="2026-01-01T00:00:05")
    wait_for(lambda: any(s["name"] == "moved" and s["watermark"] is not None
                         and s["watermark"] > 0 for s in served.client.streams()) or None)
    code, out, _ = run_cli(capsys, *remote(served, "ls"))
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines()
            if line.startswith("│") and line.count("│") > 3}
    assert "none yet" in rows["quiet"]
    assert "2026-01-01T00:00:05+00:00" in rows["moved"]
    assert "-9223372036854775808" not in out


def test_the_feed_wants_the_token_too(served):
    """A server with a token refuses a feed CONNECT without it, then closes the connection."""
    served.client.submit("CREATE STREAM fed WITH (source='feed')")
    for token, ok in ((None, False), ("wrong", False), (TOKEN, True)):
        with socket.create_connection(("127.0.0.1", served.feed_port), timeout=60) as sock:
            hello = {"kind": "CONNECT", "stream": "fed", **({"token": token} if token else {})}
            sock.sendall(json.dumps(hello).encode() + b"\n")
            answer = json.loads(sock.makefile("rb").readline())
            assert answer["ok"] is ok, answer
            if not ok:
                assert answer == {"ok": False, "error": "missing or wrong token",
                                  "kind": "AuthError"}
                assert sock.recv(1) == b""  # closed by the server


@pytest.mark.slow
def test_submit_a_streamapas_query_from_its_file(capsys, served, no_env, tmp_path):
    path = tmp_path / "peaks.apas"
    path.write_text("where window.range($s, 10) select o[k = $s.k, top = agg.max($s.v)];\n"
                    "select [$o[T]]\n")
    code, out, err = run_cli(capsys, *remote(served, "submit", "--language", "apas",
                                             str(path)))
    assert code == 0, err
    assert out.strip() == "peaks"
    # the same operators as max_v's SQL: one aggregate node for both
    assert "(shared with max_v)" in served.client.explain("peaks")
    bad = tmp_path / "bad.apas"
    bad.write_text("select o[k = $s.k - 1];\nselect [$o[T]]\n")
    code, _, err = run_cli(capsys, *remote(served, "submit", "--language", "apas", str(bad)))
    assert code == 1
    assert "operator '-' does not apply to STRING and INTEGER" in err
    code, _, err = run_cli(capsys, *remote(served, "submit", "--language", "apas",
                                           "select o[k = $s.k]; select [$o[T]]"))
    assert code == 1 and "needs a name: give --name NAME" in err
    served.client.drop("peaks")


def test_every_option_of_every_command_says_what_it_does():
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    silent = [f"{name} {' '.join(a.option_strings) or a.dest}"
              for name, command in commands.choices.items() for a in command._actions
              if not a.help and not isinstance(a, argparse._HelpAction)]
    assert not silent, f"options without help text: {silent}"
