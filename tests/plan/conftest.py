"""The plan layer's catalog: streams and a table known by their schemas alone (no JVM)."""

from __future__ import annotations

import pytest
from pyspark.sql.types import DoubleType, LongType, StringType, StructField, StructType

from sparkcq.catalog import Catalog, StreamInfo, TableInfo
from sparkcq.errors import Location
from sparkcq.plan.definitions import bind_stream
from sparkcq.plan.nodes import TableScan
from sparkcq.plan.options import StreamOptions


@pytest.fixture(scope="session")
def catalog():
    """Streams s and s2 (k STRING, v DOUBLE, t BIGINT), event time t; table h (k, g STRING)."""
    catalog = Catalog()
    schema = StructType([StructField("k", StringType()), StructField("v", DoubleType()),
                         StructField("t", LongType())])
    for name in ("s", "s2"):
        text = f"CREATE STREAM {name}"
        node = bind_stream(name, schema, StreamOptions(event_time="t"), text,
                           Location.of_span(text, 0, len(text))).node
        catalog.add_stream(StreamInfo(name, schema, node.time_col, None, node.time_kind, {},
                                      node))
    hosts = StructType([StructField("k", StringType()), StructField("g", StringType())])
    catalog.add_table(TableInfo("h", hosts, None, TableScan("h", hosts)))  # no rows read
    return catalog
