"""A directory of CSV, JSON-lines or Parquet files; each new file is read once.

Contract: every poll lists the directory and reads the files not seen before, in name order,
with the stream's schema (no inference). A file must be complete when it appears: write it
elsewhere and rename it into the directory. With ``bounded='true'`` the stream ends with the
poll that takes the last file (or that finds none), so ``run_until_idle`` processes a fixed
data set.
``files_per_cycle='n'`` reads at most n of the new files per poll (the rest wait for the
next cycles, in name order), so a large data set is taken in cycles of a chosen size.
Without it a poll catches up on every new file, up to ``max_bytes_per_cycle`` (default
256 MB; at least one file): a stream that fell behind is taken in few large cycles, which
Spark parses in parallel (a task per file or split), but never all at once.
In an untrusted engine (``roots`` given) a file whose real path lies outside the data roots
(a link placed in the directory) is skipped.

A batch says about how many rows it holds before Spark reads it (its ``rows_estimate``),
so that even a stream's first cycle runs on every core when it is large (a backlog of 3
million rows once ran on one core for want of a count; ``SmallCycles.uncounted_rows``):
Parquet files' footers count their rows; a text file (CSV, JSON lines) is estimated from
the lines of its first ``SAMPLE_BYTES`` scaled to its size, which holds for long rows and
short ones alike where a fixed guess of bytes per row does not.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from sparkcq.errors import SourceError
from sparkcq.io.sources import Source
from sparkcq.plan.sandbox import is_inside
from sparkcq.runtime.cycle_input import SourceBatch

FORMATS = {"csv": "csv", "json": "json", "parquet": "parquet"}
DEFAULT_MAX_BYTES = 256 * 1024 * 1024
# how much of a text file is read to estimate its rows from its lines
SAMPLE_BYTES = 64 * 1024


def text_rows(path: str) -> int:
    """About how many rows (lines) the text file at ``path`` holds: counted if it is no
    longer than ``SAMPLE_BYTES``, else its first ``SAMPLE_BYTES``' lines scaled to its size.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(SAMPLE_BYTES)
    lines = head.count(b"\n")
    if len(head) >= size:
        return lines + (1 if head and not head.endswith(b"\n") else 0)
    return size * max(lines, 1) // len(head)


def _size_option(options: dict[str, str], key: str, default: int, stream: str) -> int:
    """A positive number of bytes: ``1048576``, ``64KB``, ``256MB`` or ``1GB``."""
    text = options.get(key)
    if text is None:
        return default
    units = {"KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3}
    number, unit = text.strip().upper(), 1
    for suffix, scale in units.items():
        if number.endswith(suffix):
            number, unit = number.removesuffix(suffix).strip(), scale
    try:
        size = int(number) * unit
    except ValueError:
        size = 0
    if size < 1:
        msg = (f"stream {stream!r}: {key} must be a positive size such as '256MB', "
               f"got {text!r}")
        raise SourceError(msg)
    return size


def _up_to(files: list[str], max_bytes: int) -> list[str]:
    """The first files, in order, whose sizes add up to at most ``max_bytes`` (one at
    least, however large).
    """
    taken: list[str] = []
    total = 0
    for path in files:
        size = os.path.getsize(path)
        if taken and total + size > max_bytes:
            break
        taken.append(path)
        total += size
    return taken


class FilesSource(Source):
    """New files of a directory, read once each with Spark."""

    def __init__(self, spark: SparkSession, name: str, schema: StructType, options: dict[str, str],
                 roots: Sequence[str] | None = None):
        self.spark = spark
        self.roots = roots
        self.name = name
        self.schema = schema
        self.path = options.get("path")
        if not self.path:
            msg = f"stream {name!r}: source='files' needs path='<directory>'"
            raise SourceError(msg)
        fmt = options.get("format", "csv").lower()
        if fmt not in FORMATS:
            msg = f"stream {name!r}: format {fmt!r} is not one of {', '.join(FORMATS)}"
            raise SourceError(msg)
        self.format = fmt
        self.header = options.get("header", "true")
        self.bounded = options.get("bounded", "false").lower() == "true"
        try:
            self.per_cycle = int(options["files_per_cycle"]) if "files_per_cycle" in options \
                else None
        except ValueError:
            msg = f"stream {name!r}: files_per_cycle must be a number of files"
            raise SourceError(msg) from None
        if self.per_cycle is not None and self.per_cycle < 1:
            msg = f"stream {name!r}: files_per_cycle must be at least 1"
            raise SourceError(msg)
        self.max_bytes = _size_option(options, "max_bytes_per_cycle", DEFAULT_MAX_BYTES, name)
        self.seen: set[str] = set()
        self.last_files: list[str] = []  # what the last poll read
        self.ended = False

    def new_files(self) -> list[str]:
        """The files of the folder not read yet, in name order (hidden ones and links that
        lead outside the data roots left out).
        """
        assert self.path is not None
        if not os.path.isdir(self.path):
            return []
        paths = sorted(os.path.join(self.path, n) for n in os.listdir(self.path)
                       if not n.startswith((".", "_")))
        paths = [p for p in paths if os.path.isfile(p) and p not in self.seen]
        if self.roots is not None:
            paths = [p for p in paths if is_inside(os.path.realpath(p), self.roots)]
        return paths

    def has_pending(self) -> bool:  # noqa: D102
        return not self.ended and (self.bounded or bool(self.new_files()))

    def poll(self) -> SourceBatch:  # noqa: D102
        if self.ended:
            return SourceBatch()
        files = self.new_files()
        if not files:
            if self.bounded:
                self.ended = True
                return SourceBatch(None, None, True)
            return SourceBatch()
        files = files[: self.per_cycle] if self.per_cycle else _up_to(files, self.max_bytes)
        self.seen.update(files)
        # a fixed data set ends with its last file: the cycle that reads it closes windows
        # instead of leaving them to a cycle of no input
        self.ended = self.bounded and not self.new_files()
        self.last_files = files
        return SourceBatch(self.read(files), None, self.ended,
                           rows_estimate=self.rows_in(files))

    def read(self, files: list[str]) -> DataFrame:
        """The rows of ``files``, read by Spark."""
        reader = self.spark.read.schema(self.schema)
        if self.format == "csv":
            reader = reader.option("header", self.header)
        return reader.format(FORMATS[self.format]).load(files)

    def rows_in(self, files: list[str]) -> int:
        """About how many rows ``files`` hold (see module): counted in Parquet footers,
        estimated from a text file's lines. A Parquet file whose footer cannot be read is
        estimated as text; Spark's read of it then says what is wrong.
        """
        rows = 0
        for path in files:
            if self.format == "parquet":
                try:
                    rows += pq.read_metadata(path).num_rows
                    continue
                except (OSError, pa.ArrowException):
                    pass
            rows += text_rows(path)
        return rows

    def position(self) -> dict[str, Any]:
        """The files read so far, and whether the stream ended."""
        return {"seen": sorted(self.seen), "ended": self.ended}

    def seek(self, position: dict[str, Any]) -> None:  # noqa: D102
        self.seen = set(position["seen"])
        self.ended = bool(position["ended"])

    def describe(self, batch: SourceBatch, folder: str) -> dict[str, Any]:
        """The files the last poll read (empty when it read none)."""
        files = self.last_files if batch.df is not None else []
        return {"files": files, "end": batch.end}

    def replay(self, described: dict[str, Any]) -> SourceBatch:  # noqa: D102
        files = list(described["files"])
        self.seen.update(files)
        self.ended = self.ended or bool(described["end"])
        return SourceBatch(self.read(files) if files else None, None, bool(described["end"]),
                           rows_estimate=self.rows_in(files))
