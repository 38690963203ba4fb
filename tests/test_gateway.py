"""Calls from Python into the JVM: lookups remembered, short lists sent in one call."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from py4j import clientserver, java_gateway
from pyspark.sql import functions as F

from sparkcq.gateway import fewer_round_trips


@contextmanager
def commands_sent() -> Iterator[list[str]]:
    """The py4j commands this thread sends meanwhile (their first lines)."""
    sent: list[str] = []
    originals = {}
    for cls in (clientserver.ClientServerConnection, java_gateway.GatewayConnection):
        originals[cls] = cls.send_command

        def counting(self, command, _send=originals[cls]):
            sent.append(" ".join(command.split("\n")[:3]))
            return _send(self, command)
        cls.send_command = counting
    try:
        yield sent
    finally:
        for cls, send in originals.items():
            cls.send_command = send


def test_functions_and_selects_make_no_lookups_and_no_list_building_calls(spark):
    fewer_round_trips(spark)
    df = spark.range(6).selectExpr("id AS k", "id * 10 AS v")

    def pick():
        k, v = F.col("k"), F.col("v")
        return df.select(k, (v + k).alias("w"), F.lit(1).alias("one"))
    pick()  # the first time looks each method up
    with commands_sent() as sent:
        picked = pick()
    assert sent, "the select was built in the JVM"
    lookups = [c for c in sent if c.startswith("r ")]
    adds = [c for c in sent if " add " in f" {c} "]
    assert lookups == [] and adds == [], sent
    assert [tuple(r) for r in picked.collect()] == [(i, 11 * i, 1) for i in range(6)]


def test_long_lists_and_lists_holding_none_still_reach_the_jvm_whole(spark):
    fewer_round_trips(spark)
    df = spark.range(4).selectExpr("id AS k")
    wide = df.selectExpr(*[f"k + {i} AS c{i}" for i in range(12)])  # twelve: built as before
    assert wide.columns == [f"c{i}" for i in range(12)]
    assert [tuple(r) for r in wide.where("k = 2").collect()] == [tuple(range(2, 14))]
    # List.of refuses nulls: a list holding None is built element by element
    assert sorted(r.k for r in df.where(F.col("k").isin([1, None, 3])).collect()) == [1, 3]


def test_installing_twice_changes_nothing(spark):
    fewer_round_trips(spark)
    view = spark.sparkContext._jvm
    fewer_round_trips(spark)
    assert spark.sparkContext._jvm is view and spark._jvm is view
