"""Sources, sinks, derived streams, interval streams and saved state, end to end."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from sparkcq import Engine
from sparkcq.cli import main as cli_main
from sparkcq.errors import AnalysisError
from sparkcq.io.files import SAMPLE_BYTES, text_rows
from sparkcq.io.sinks import CallbackSink, FilesSink, QueryOutput


def push_all(eng, stream, rows):
    eng.push(stream, rows, end=True)
    eng.run_until_idle()


def test_stream_with_end_time_keeps_its_intervals(engine):
    engine.execute("""
        CREATE STREAM speeds (sector STRING, speed BIGINT, t BIGINT, t_end BIGINT)
          WITH (event_time='t', end_time='t_end');
        CREATE QUERY q AS SELECT sector, avg(speed) AS a FROM speeds GROUP BY sector;
    """)
    push_all(engine, "speeds", [
        {"sector": "s1", "speed": 50, "t": 0, "t_end": 10},
        {"sector": "s1", "speed": 70, "t": 5, "t_end": 8},
    ])
    got = [tuple(r) for r in engine.results("q")[["a", "_ts", "_te"]].itertuples(index=False)]
    assert sorted(got) == [(50.0, 0, 5), (50.0, 8, 10), (60.0, 5, 8)]


def test_derived_stream_feeds_other_queries(engine):
    engine.execute("""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE STREAM totals AS ISTREAM SELECT k, sum(v) AS total FROM s [RANGE 10] GROUP BY k;
        CREATE QUERY big AS SELECT k, total FROM totals WHERE total >= 5;
    """)
    push_all(engine, "s", [{"k": "a", "v": 2, "t": 1}, {"k": "a", "v": 3, "t": 2},
                           {"k": "a", "v": 4, "t": 3}])
    # sums: 2 on [1,2), 5 on [2,3), 9 on [3,11), 7 on [11,12) (2 left), 4 on [12,13)
    got = [tuple(r) for r in engine.results("big")[["total", "_ts"]].itertuples(index=False)]
    assert sorted(got) == [(5, 2), (7, 11), (9, 3)]


def test_table_from_parquet_files(engine, tmp_path):
    path = str(tmp_path / "hosts")
    pd.DataFrame({"ip": ["1.1.1.1", "2.2.2.2"], "host": ["alpha", "beta"]}).to_parquet(
        os.path.join(tmp_path, "hosts.parquet"))
    os.makedirs(path)
    os.replace(os.path.join(tmp_path, "hosts.parquet"), os.path.join(path, "part.parquet"))
    engine.execute(f"""
        CREATE TABLE hosts (ip STRING, host STRING) WITH (format='parquet', path='{path}');
        CREATE STREAM pk (ip STRING, bytes BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY q AS ISTREAM SELECT h.host AS host, p.bytes AS bytes
          FROM pk [NOW] AS p JOIN hosts AS h ON p.ip = h.ip;
    """)
    push_all(engine, "pk", [{"ip": "2.2.2.2", "bytes": 10, "t": 1},
                            {"ip": "9.9.9.9", "bytes": 20, "t": 2}])
    assert list(engine.results("q")["host"]) == ["beta"]


def test_files_source_reads_each_new_file_once(engine, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "a.csv").write_text("k,v,t\nx,1,1\nx,2,2\n")
    engine.execute(f"""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT)
          WITH (event_time='t', source='files', format='csv', path='{src}');
        CREATE QUERY q AS SELECT k, v FROM s;
    """)
    engine.run_cycle()
    (src / "b.csv").write_text("k,v,t\ny,3,5\n")
    engine.run_cycle()
    engine.run_cycle()  # no new file: nothing is read twice
    assert sorted(engine.results("q")["v"]) == [1, 2]  # t=5 waits: the watermark is 5
    assert engine.metrics()["watermarks"]["s"] == 5


def test_files_source_takes_a_chosen_number_of_files_per_cycle(engine, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(5):
        (src / f"{i}.csv").write_text(f"k,v,t\nx,{i},{i}\n")
    engine.execute(f"""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT)
          WITH (event_time='t', source='files', path='{src}', bounded='true',
                files_per_cycle='2');
        CREATE QUERY q AS SELECT k, v FROM s;
    """)
    assert engine.run_until_idle() == 3  # 2 + 2 + 1 files, the last cycle ends the stream
    assert [r.rows_in for r in engine.reports] == [2, 2, 1]
    assert engine.scans["s"].ended
    assert sorted(engine.results("q")["v"]) == [0, 1, 2, 3, 4]


def test_files_source_catches_up_on_a_backlog_within_its_byte_bound(engine, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    for i in range(5):  # a header and 9 rows, the same size each
        rows = "".join(f"x,{i},{100 + 10 * i + j}\n" for j in range(9))
        (src / f"{i}.csv").write_text(f"k,v,t\n{rows}")
    sizes = {os.path.getsize(src / f"{i}.csv") for i in range(5)}
    assert len(sizes) == 1
    size = sizes.pop()
    engine.execute(f"""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT)
          WITH (event_time='t', source='files', path='{src}', bounded='true',
                max_bytes_per_cycle='{2 * size + 1}');
        CREATE STREAM big (k STRING, v BIGINT, t BIGINT)
          WITH (event_time='t', source='files', path='{src}', bounded='true');
        CREATE QUERY q AS SELECT k, v FROM s;
        CREATE QUERY everything AS SELECT k, v FROM big;
    """)
    assert engine.run_until_idle() == 3  # s: 2 + 2 + 1 files; big: all 5 in the first cycle
    assert [r.rows_in for r in engine.reports] == [9 * 7, 9 * 2, 9]
    assert sorted(engine.results("q")["v"]) == sorted(engine.results("everything")["v"])
    with pytest.raises(AnalysisError, match="max_bytes_per_cycle must be a positive size"):
        engine.execute(f"CREATE STREAM bad (k STRING, v BIGINT, t BIGINT) WITH ("
                       f"event_time='t', source='files', path='{src}', "
                       "max_bytes_per_cycle='lots')")


def test_a_text_files_rows_are_counted_or_estimated_from_its_first_lines(tmp_path):
    """A short file's lines are counted (a last line without its newline too); a long
    one's are its first ``SAMPLE_BYTES``' lines scaled to its size, near the truth when
    its rows are alike (long NEXMark-like rows as well as short ones).
    """
    short = tmp_path / "short.csv"
    short.write_text("k,v\na,1\nb,2")
    assert text_rows(str(short)) == 3
    for width in (8, 150):
        rows = 4 * SAMPLE_BYTES // width
        path = tmp_path / f"long{width}.csv"
        path.write_text("".join(f"{i:0{width - 1}d}\n" for i in range(rows)))
        assert abs(text_rows(str(path)) - rows) <= rows // 100


def test_generator_is_deterministic_and_runs_inside_spark(spark):
    def run():
        eng = Engine(spark=spark)
        eng.execute("""
            CREATE STREAM g (k STRING, v DOUBLE, t TIMESTAMP)
              WITH (event_time='t', source='generator', rate='100', keys='3', pace='fast',
                    batch='250', limit='500', expr_v='round(100 * rnd)');
            CREATE QUERY q AS SELECT k, count(*) AS n, sum(v) AS s FROM g [RANGE 1 SECOND]
              GROUP BY k;
        """)
        eng.run_until_idle()
        return eng.results("q").sort_values(["k", "_ts"]).reset_index(drop=True)

    first, second = run(), run()
    pd.testing.assert_frame_equal(first, second)
    assert set(first["k"]) == {"k_0", "k_1", "k_2"}
    assert first["n"].max() <= 100 and len(first) > 10


def test_files_and_callback_sinks(engine, tmp_path):
    seen = []
    engine.register_sink("cb", CallbackSink(lambda q, c, f: seen.append((q, c, len(f)))))
    engine.execute(f"""
        CREATE STREAM s (k STRING, t BIGINT) WITH (event_time='t');
        CREATE QUERY f INTO files WITH (path='{tmp_path}', format='json') AS SELECT k FROM s;
        CREATE QUERY c INTO cb AS SELECT k FROM s;
    """)
    engine.push("s", [{"k": "a", "t": 1}], watermark=2)
    engine.run_until_idle()
    engine.push("s", [{"k": "b", "t": 3}], end=True)
    engine.run_until_idle()
    files = sorted(os.listdir(tmp_path / "f"))
    assert files == ["cycle-00000000.jsonl", "cycle-00000001.jsonl"]
    rows = [json.loads(line) for name in files for line in (tmp_path / "f" / name).open()]
    assert [(r["k"], r["_ts"], r["_op"]) for r in rows] == [("a", 1, "I"), ("b", 3, "I")]
    assert seen == [("c", 0, 1), ("c", 1, 1)]


def test_files_sink_commits_a_cycle_of_all_queries_under_a_path_at_once(tmp_path):
    sink = FilesSink()

    def output(name: str) -> QueryOutput:
        return QueryOutput(name, ["k"], False, {"path": str(tmp_path)})

    frame = pd.DataFrame({"k": ["x"], "_ts": [1], "_te": [1], "_op": ["I"]})
    sink.write(0, {"a": (output("a"), frame), "b": (output("b"), frame)})
    assert sorted(os.listdir(tmp_path)) == ["_committed-cycles", "a", "b"]
    assert FilesSink.committed_cycles(str(tmp_path)) == [0]
    # one query's file cannot be written: no file of the cycle is put in place, no marker
    unwritable = pd.DataFrame({"k": [object()], "_ts": [2], "_te": [2], "_op": ["I"]})
    with pytest.raises(Exception, match="object"):
        sink.write(1, {"a": (output("a"), frame), "b": (output("b"), unwritable)})
    assert sorted(os.listdir(tmp_path / "a")) == ["cycle-00000000.parquet"]
    assert sorted(os.listdir(tmp_path / "b")) == ["cycle-00000000.parquet"]
    assert FilesSink.committed_cycles(str(tmp_path)) == [0]
    sink.write(1, {"a": (output("a"), frame), "b": (output("b"), frame)})  # done again
    assert FilesSink.committed_cycles(str(tmp_path)) == [0, 1]


def test_saved_state_resumes_in_a_new_engine(spark, tmp_path):
    ddl = """
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t');
        CREATE QUERY q AS SELECT k, sum(v) AS total, min(v) AS low FROM s [RANGE 5] GROUP BY k;
    """
    first = [{"k": "a", "v": 3, "t": 1}, {"k": "a", "v": 1, "t": 2}, {"k": "a", "v": 9, "t": 4}]
    second = [{"k": "a", "v": 2, "t": 6}, {"k": "b", "v": 5, "t": 7}]

    whole = Engine(spark=spark)
    whole.execute(ddl)
    whole.push("s", first, watermark=4)
    whole.push("s", second, end=True)
    whole.run_until_idle()

    before = Engine(spark=spark)
    before.execute(ddl)
    before.push("s", first, watermark=4)
    before.run_until_idle()
    before.save_state(str(tmp_path / "ckpt"))
    after = Engine(spark=spark)
    after.execute(ddl)
    after.restore_state(str(tmp_path / "ckpt"))
    after.push("s", second, end=True)
    after.run_until_idle()

    from sparkcq.inspection import close_elements

    records = pd.concat([before.sinks["memory"].frame("q", []),
                         after.sinks["memory"].frame("q", [])], ignore_index=True)
    resumed = close_elements(records, ["k", "total", "low"])
    key = ["k", "_ts"]
    pd.testing.assert_frame_equal(
        resumed.sort_values(key).reset_index(drop=True).astype({"_te": "float"}),
        whole.results("q").sort_values(key).reset_index(drop=True).astype({"_te": "float"}),
        check_dtype=False)


def test_sparkcq_run_executes_a_script(tmp_path, capsys):
    script = tmp_path / "q.sql"
    data = tmp_path / "in"
    data.mkdir()
    (data / "1.csv").write_text("k,v,t\nx,5,1\ny,7,2\n")
    script.write_text(f"""
        CREATE STREAM s (k STRING, v BIGINT, t BIGINT)
          WITH (event_time='t', source='files', path='{data}', bounded='true');
        CREATE QUERY totals AS SELECT k, sum(v) AS total FROM s [UNBOUNDED] GROUP BY k;
    """)
    assert cli_main(["run", str(script), "--interval", "0"]) == 0
    out = capsys.readouterr().out
    assert "totals" in out and "x" in out and "7" in out


@pytest.mark.parametrize("bad", ["CREATE QUERY q INTO files AS SELECT 1 AS x FROM s"])
def test_files_sink_needs_a_path(engine, bad):
    engine.execute("CREATE STREAM s (t BIGINT) WITH (event_time='t')")
    with pytest.raises(Exception, match="files sink needs"):
        engine.execute(bad)


RESUMED = {
    "grouped avg of a stream": "SELECT k, avg(v) AS a, sum(v) AS s FROM s GROUP BY k",
    "per-event RANGE avg": "SELECT k, avg(v) AS a, count(*) AS n FROM s [RANGE 5] GROUP BY k",
    "hopping avg and max": "SELECT k, avg(v) AS a, max(v) AS m FROM s [RANGE 6 SLIDE 3] "
                           "GROUP BY k",
    "min and avg over RANGE": "SELECT k, min(v) AS m, avg(v) AS a FROM s [RANGE 5] GROUP BY k",
    "count(DISTINCT)": "SELECT k, count(DISTINCT v) AS n FROM s [RANGE 5] GROUP BY k",
}


@pytest.mark.parametrize("query", list(RESUMED.values()), ids=list(RESUMED))
def test_saved_double_aggregates_resume_exactly(spark, tmp_path, query):
    """DOUBLE sums are kept in DECIMAL(38, 10) state; it round-trips through a checkpoint
    (it once failed: the state held DECIMAL(38, 6)), and digits beyond the sixth decimal
    survive the arithmetic.
    """
    from sparkcq.inspection import close_elements

    ddl = f"""
        CREATE STREAM s (k STRING, v DOUBLE, t BIGINT) WITH (event_time='t');
        CREATE QUERY q AS {query};
    """
    first = [{"k": "a", "v": 1.2345678, "t": 1}, {"k": "b", "v": 2.25, "t": 2},
             {"k": "a", "v": 3.0000001, "t": 4}]
    second = [{"k": "a", "v": 0.1, "t": 6}, {"k": "b", "v": 5.5, "t": 7},
              {"k": "a", "v": 2.0, "t": 9}]

    def engine() -> Engine:
        eng = Engine(spark=spark)
        eng.execute(ddl)
        return eng

    whole = engine()
    whole.push("s", first, watermark=5)
    whole.push("s", second, end=True)
    whole.run_until_idle()
    before = engine()
    before.push("s", first, watermark=5)
    before.run_until_idle()
    before.save_state(str(tmp_path / "ckpt"))
    after = engine()
    after.restore_state(str(tmp_path / "ckpt"))
    after.push("s", second, end=True)
    after.run_until_idle()

    cols = [c for c in whole.results("q").columns if not c.startswith("_")]
    records = pd.concat([before.sinks["memory"].frame("q", []),
                         after.sinks["memory"].frame("q", [])], ignore_index=True)
    key = ["k", "_ts", *cols]
    resumed = close_elements(records, cols).sort_values(key).reset_index(drop=True)
    want = whole.results("q").sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(resumed.astype({"_te": "float"}),
                                  want.astype({"_te": "float"}), check_dtype=False)
    if "a" in cols and "SLIDE" not in query:  # a's average at 4 (both events), every digit
        at4 = want[(want["k"] == "a") & (want["_ts"] <= 4) & (want["_te"] > 4)]
        assert at4["a"].tolist() == [(1.2345678 + 3.0000001) / 2]
