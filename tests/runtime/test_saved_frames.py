"""A checkpoint's frames written by one Spark job and read back each as it was saved."""

from __future__ import annotations

import os

import pytest
from pyspark.sql.types import (
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from sparkcq.errors import CatalogError
from sparkcq.runtime.saved_frames import FrameReader, FrameWriter

PANES = StructType([StructField("k", StringType()), StructField("_pe", LongType()),
                    StructField("s", DoubleType())])
HELD = StructType([StructField("k", StringType()), StructField("tags", MapType(
    StringType(), LongType())), StructField("_t", LongType())])


def rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.collect())


def test_frames_of_different_schemas_read_back_apart(spark, tmp_path):
    root = str(tmp_path)
    panes = [("a", 10, 1.5), ("b", 10, None), ("a", 20, -2.0)]
    held = [("x", {"p": 1}, 7), ("y", None, 9)]
    frames = FrameWriter(root)
    frames.add(os.path.join(root, "op1", "panes"), spark.createDataFrame(panes, PANES))
    frames.add(os.path.join(root, "op1", "nothing"), None)
    frames.add(os.path.join(root, "scan", "held"), spark.createDataFrame(held, HELD))
    frames.add(os.path.join(root, "op2", "empty"), spark.createDataFrame([], PANES))
    frames.write()
    assert os.path.isdir(os.path.join(root, "op1"))  # a holder's folder, for its own files

    reader = FrameReader(spark, root)
    got = reader.read(os.path.join(root, "op1", "panes"), PANES)
    assert got.schema.names == ["k", "_pe", "s"]
    assert len(rows(got)) == 3 and set(rows(got)) == set(panes)
    assert sorted(rows(reader.read(os.path.join(root, "scan", "held"), HELD)),
                  key=lambda r: r[0]) == [("x", {"p": 1}, 7), ("y", None, 9)]
    assert rows(reader.read(os.path.join(root, "op1", "nothing"), PANES)) == []
    assert rows(reader.read(os.path.join(root, "op2", "empty"), PANES)) == []


def test_a_checkpoint_of_a_dataset_per_frame_still_reads(spark, tmp_path):
    """Written before frames shared one dataset: each frame a Parquet dataset at its path."""
    panes = [("a", 10, 1.5), ("b", 20, None)]
    path = os.path.join(str(tmp_path), "op1", "panes")
    spark.createDataFrame(panes, PANES).write.parquet(path)
    got = FrameReader(spark, str(tmp_path)).read(path, PANES)
    assert set(rows(got)) == set(panes)


def test_a_missing_folder_is_named(spark, tmp_path):
    with pytest.raises(CatalogError, match="no saved frames under .*no such folder"):
        FrameReader(spark, str(tmp_path / "gone"))
