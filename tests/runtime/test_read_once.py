"""A stream batch that one window aggregate reads is read where the aggregate reads it, not
cached: its rows, late rows and largest event time are still counted (the watermark moves,
late rows become dead letters), and a consumer added later still finds the held events.
"""

from __future__ import annotations

from sparkcq import Engine
from sparkcq.plan.nodes import StreamScan

STREAM = ("CREATE STREAM s (k STRING, v BIGINT, t BIGINT) WITH (event_time='t', "
          "source='files', path='{data}', files_per_cycle='1', bounded='true', lateness='0');")
PER_CHUNK = ("CREATE QUERY {name} INTO memory AS RSTREAM SELECT k, sum(v) AS v "
             "FROM s [CUT ON t BY 10] GROUP BY k;")


def write_files(data) -> None:
    data.mkdir()
    rows = [["a,1,1", "a,2,5", "b,4,12"],  # chunks [0, 10) and [10, 20)
            ["a,16,15", "b,32,20"],
            ["a,100,3", "b,64,24"]]  # t=3 is late: the watermark is 12 by then
    for i, part in enumerate(rows):
        (data / f"part-{i}.csv").write_text("k,v,t\n" + "\n".join(part) + "\n")


def test_a_batch_one_window_reads_is_counted_where_it_is_read(spark, tmp_path):
    data = tmp_path / "in"
    write_files(data)
    eng = Engine(spark=spark, data_roots=[str(tmp_path)])
    eng.execute(STREAM.format(data=data) + PER_CHUNK.format(name="sums"))
    eng.run_cycle()
    # not cached: the batch is held as the files' reading itself
    assert [b.cached for b in eng.scans["s"].progress.held] == [False]
    eng.run_until_idle()
    got = sorted(eng.results("sums")[["k", "v", "_ts"]].itertuples(index=False, name=None))
    assert got == [("a", 3, 10), ("a", 16, 20), ("b", 4, 20), ("b", 96, 30)]
    dead = eng.dead_letters("s")
    assert list(dead["v"]) == [100]
    assert "late" in dead["_reason"].iloc[0]


def test_a_second_reader_makes_the_batch_cached_and_both_see_every_event(spark, tmp_path):
    data = tmp_path / "in"
    write_files(data)
    eng = Engine(spark=spark, data_roots=[str(tmp_path)])
    eng.execute(STREAM.format(data=data) + PER_CHUNK.format(name="sums")
                + "CREATE QUERY big INTO memory AS SELECT k, v FROM s WHERE v > 10;")
    eng.run_cycle()
    assert [b.cached for b in eng.scans["s"].progress.held] == [True]
    eng.run_until_idle()
    got = sorted(eng.results("sums")[["k", "v", "_ts"]].itertuples(index=False, name=None))
    assert got == [("a", 3, 10), ("a", 16, 20), ("b", 4, 20), ("b", 96, 30)]
    assert sorted(eng.results("big")["v"]) == [16, 32, 64]


def test_a_family_of_windows_reads_the_batch_once_for_all_its_members(spark, tmp_path):
    """Two chunk windows of one family take their panes from one reading of the batch:
    it is not cached, and each member still sees every event.
    """
    data = tmp_path / "in"
    write_files(data)
    eng = Engine(spark=spark, data_roots=[str(tmp_path)])
    eng.execute(STREAM.format(data=data) + PER_CHUNK.format(name="sums")
                + "CREATE QUERY counts INTO memory AS RSTREAM SELECT k, count(*) AS n "
                  "FROM s [CUT ON t BY 10] GROUP BY k;")
    eng.run_cycle()
    assert [b.cached for b in eng.scans["s"].progress.held] == [False]
    eng.run_until_idle()
    got = sorted(eng.results("sums")[["k", "v", "_ts"]].itertuples(index=False, name=None))
    assert got == [("a", 3, 10), ("a", 16, 20), ("b", 4, 20), ("b", 96, 30)]
    got = sorted(eng.results("counts")[["k", "n", "_ts"]].itertuples(index=False, name=None))
    assert got == [("a", 1, 20), ("a", 2, 10), ("b", 1, 20), ("b", 2, 30)]
    assert list(eng.dead_letters("s")["v"]) == [100]


def test_an_edge_is_cached_only_when_two_read_it(spark, tmp_path):
    """A window aggregate takes the batch's arrivals, not the stream's edge: beside it, one
    filter reads the edge once (built where it is read), two read it twice (cached).
    """
    data = tmp_path / "in"
    write_files(data)
    eng = Engine(spark=spark, data_roots=[str(tmp_path)])
    eng.execute(STREAM.format(data=data) + PER_CHUNK.format(name="sums")
                + "CREATE QUERY big INTO memory AS SELECT k, v FROM s WHERE v > 10;")
    scan = next(n for n in eng.plan.ops if isinstance(n, StreamScan) and n.name == "s")
    assert eng.queries.compiled.edge_readers[scan] == 1
    eng.execute("CREATE QUERY small INTO memory AS SELECT k, v FROM s WHERE v < 10;")
    assert eng.queries.compiled.edge_readers[scan] == 2
    eng.run_until_idle()
    got = sorted(eng.results("sums")[["k", "v", "_ts"]].itertuples(index=False, name=None))
    assert got == [("a", 3, 10), ("a", 16, 20), ("b", 4, 20), ("b", 96, 30)]
    assert sorted(eng.results("big")["v"]) == [16, 32, 64]
    assert sorted(eng.results("small")["v"]) == [1, 2, 4]
