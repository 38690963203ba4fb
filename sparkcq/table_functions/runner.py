"""The instances of a user table function, run inside Spark's Python workers.

A table-function operator hands each cycle's rows of a key, together with the key's pickled
instance, to ``ChunkRunner`` through Arrow (``cogroup(...).applyInArrow``). Per key it
takes the chunks in time order (a chunk: the rows entering at one instant, its cut point),
each chunk's rows in a fixed order (the order columns, NULLs first), and calls::

    begin_chunk(Chunk(at, rows))  -> nothing      (if the class has it)
    process(rows)                 -> rows to emit (once per batch of at most BATCH_ROWS)
    end_chunk()                   -> rows to emit (if the class has it)

It returns one *output row* per emitted row, at the chunk's cut point, and one *state row*
per key: the pickled instance after the cycle. An instance is created (``cls(*args)``) for
a key's first chunk and kept for as long as the query runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa

from sparkcq.aggregates.runner import (
    dump_instance,
    load_instance,
    rows_by_group,
    typed_value_check,
    user_frames,
)
from sparkcq.errors import ExecutionError
from sparkcq.model.columns import GROUP_HASH, T
from sparkcq.table_functions.user import BATCH_ROWS, Chunk

#: the column of a state row holding the key's pickled instance
INSTANCE = "_inst"


class TableFunctionError(ExecutionError):
    """A user table function raised, or emitted rows that do not fit its declaration."""


@dataclass(frozen=True)
class ChunkRunner:
    """The function a table-function operator's cogroup applies: see the module docstring."""

    name: str  # the function's name, for messages
    origin: str  # where its code is: ``module:Class line N``
    cls: type
    args: tuple[Any, ...]  # the constructor's arguments
    keys: tuple[str, ...]  # PARTITION BY columns: one instance per value
    inputs: tuple[str, ...]  # the columns ``process`` receives, in order
    order: tuple[str, ...]  # the columns a chunk's rows are ordered by
    schema: pa.Schema  # of the output: _g, keys, _t, declared columns, _inst
    declared: tuple[str, ...]  # the declared columns' types as written (BIGINT), for messages

    @property
    def batch_rows(self) -> int:
        """Rows one ``process`` call receives at most: the class's ``batch_rows``, if it
        sets one, else ``BATCH_ROWS``.
        """
        size = getattr(self.cls, "batch_rows", BATCH_ROWS)
        return size if isinstance(size, int) and size > 0 else BATCH_ROWS

    @property
    def columns(self) -> list[str]:
        """The declared output columns, in order."""
        fixed = {GROUP_HASH, T, INSTANCE, *self.keys}
        return [f.name for f in self.schema if f.name not in fixed]

    def __call__(self, rows: pa.Table, state: pa.Table) -> pa.Table:
        """Output rows and state rows of the keys in one cogroup (one key hash)."""
        rows_of = rows_by_group(rows, self.keys)
        state_of = {k: ix[0] for k, ix in rows_by_group(state, self.keys).items()}
        saved = state.column(INSTANCE).to_pylist() if state.num_rows else []
        frame = rows.select(list(self.inputs)).to_pandas()
        ts = rows.column(T).to_pylist()
        order = [rows.column(c).to_pylist() for c in self.order]
        checks = [typed_value_check(self.schema.field(c).type, self.wrong_type(c, t))
                  for c, t in zip(self.columns, self.declared, strict=True)]
        out_rows: list[int] = []  # the input row giving each output row its key
        out_ts: list[int] = []
        values: list[list[Any]] = [[] for _ in checks]
        state_rows: list[int] = []
        pickles: list[bytes] = []
        for key, ix in rows_of.items():
            s = state_of.get(key)
            instance = load_instance(saved[s], self.cls) if s is not None else self.create()
            ix.sort(key=lambda i: (ts[i], *[(o[i] is not None, o[i]) for o in order]))
            start = 0
            while start < len(ix):
                t = ts[ix[start]]
                end = start
                while end < len(ix) and ts[ix[end]] == t:
                    end += 1
                for emitted in self.run_chunk(instance, frame, ix[start:end], t):
                    out_rows.append(ix[0])
                    out_ts.append(t)
                    for j, check in enumerate(checks):
                        values[j].append(check(emitted[j]))
                start = end
            state_rows.append(ix[0])
            pickles.append(dump_instance(instance, self.cls))
        return self.output(rows, out_rows, out_ts, values, state_rows, pickles)

    def run_chunk(self, instance: Any, frame: pd.DataFrame, ix: list[int],
                  at: int) -> list[tuple[Any, ...]]:
        """The rows emitted for one key's chunk of rows ``ix`` (in order), cut at ``at``."""
        emitted: list[tuple[Any, ...]] = []
        if callable(getattr(instance, "begin_chunk", None)):
            self.invoke(instance, "begin_chunk", Chunk(at, len(ix)))
        size = self.batch_rows
        for first in range(0, len(ix), size):
            batch = frame.iloc[ix[first:first + size]].reset_index(drop=True)
            emitted += self.rows_of(self.invoke(instance, "process", batch), "process")
        if callable(getattr(instance, "end_chunk", None)):
            emitted += self.rows_of(self.invoke(instance, "end_chunk"), "end_chunk")
        return emitted

    def create(self) -> Any:
        """A new instance for a key's first chunk."""
        try:
            return self.cls(*self.args)
        except Exception as e:
            shown = ", ".join(map(repr, self.args))
            msg = (f"table function {self.name!r} ({self.origin}): "
                   f"{self.cls.__qualname__}({shown}) raised {type(e).__name__}: {e}"
                   f"{user_frames(e)}")
            raise TableFunctionError(msg) from e

    def invoke(self, instance: Any, method: str, *args: Any) -> Any:
        """``instance.method(*args)``, naming the function if it raises."""
        try:
            return getattr(instance, method)(*args)
        except Exception as e:
            what = "rows" if method == "process" else ("chunk" if args else "")
            msg = (f"table function {self.name!r} ({self.origin}): {method}({what}) raised "
                   f"{type(e).__name__}: {e}{user_frames(e)}")
            raise TableFunctionError(msg) from e

    def rows_of(self, returned: Any, method: str) -> list[tuple[Any, ...]]:
        """What ``method`` returned, as tuples of the declared columns' values."""
        columns = self.columns
        if returned is None:
            return []
        if isinstance(returned, pd.DataFrame):
            missing = [c for c in columns if c not in returned.columns]
            if missing:
                msg = (f"table function {self.name!r} ({self.origin}): {method}() returned "
                       f"a DataFrame without column(s) {', '.join(missing)}; declared: "
                       f"{', '.join(columns)}")
                raise TableFunctionError(msg)
            return [tuple(_plain(v) for v in r)
                    for r in returned[columns].itertuples(index=False, name=None)]
        if isinstance(returned, dict):
            returned = [returned]
        if not isinstance(returned, Iterable) or isinstance(returned, str | bytes):
            msg = (f"table function {self.name!r} ({self.origin}): {method}() returned "
                   f"{type(returned).__name__}; return a pandas DataFrame, a list of tuples "
                   "or dicts, a dict, or None")
            raise TableFunctionError(msg)
        out = []
        for row in returned:
            if isinstance(row, dict):
                row = tuple(row.get(c) for c in columns)
            if not isinstance(row, tuple | list) or len(row) != len(columns):
                msg = (f"table function {self.name!r} ({self.origin}): {method}() emitted "
                       f"{row!r}; each row needs {len(columns)} value(s): "
                       f"{', '.join(columns)}")
                raise TableFunctionError(msg)
            out.append(tuple(_plain(v) for v in row))
        return out

    def wrong_type(self, column: str, declared: str) -> Callable[[Any], ExecutionError]:
        """The error for a value of ``column`` that does not fit its declared type."""
        def wrong(v: Any) -> ExecutionError:
            msg = (f"table function {self.name!r} ({self.origin}): column {column!r} got "
                   f"{v!r} ({type(v).__name__}), but it is declared {declared}")
            return TableFunctionError(msg)

        return wrong

    def output(self, rows: pa.Table, out_rows: list[int], out_ts: list[int],
               values: list[list[Any]], state_rows: list[int],
               pickles: list[bytes]) -> pa.Table:
        """Output rows then state rows, keys taken from the input (types kept exactly)."""
        no, ns = len(out_rows), len(state_rows)
        taken = rows.select([GROUP_HASH, *self.keys]).take(
            pa.array(out_rows + state_rows, type=pa.int64()))
        cols: dict[str, pa.Array] = {
            name: taken.column(name).combine_chunks() for name in (GROUP_HASH, *self.keys)}
        cols[T] = pa.array(out_ts + [None] * ns, type=pa.int64())
        for j, c in enumerate(self.columns):
            cols[c] = pa.array(values[j] + [None] * ns, type=self.schema.field(c).type)
        cols[INSTANCE] = pa.array([None] * no + pickles, type=pa.binary())
        return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in self.schema],
                                    schema=self.schema)


def _plain(v: Any) -> Any:
    """A value pandas handed back as a plain Python value: NaN and NaT of a missing value
    as None, a numpy scalar as its Python value, a pandas Timestamp as a datetime.
    """
    if v is None or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if isinstance(v, pd.Timestamp):
        return v.to_pydatetime()
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        return v.item()
    return v


def cogroup_function(runner: ChunkRunner) -> Callable[[pa.Table, pa.Table], pa.Table]:
    """``runner`` as the plain two-argument function ``applyInArrow`` expects."""
    def apply(rows: pa.Table, state: pa.Table) -> pa.Table:
        return runner(rows, state)

    return apply


__all__ = ["INSTANCE", "ChunkRunner", "TableFunctionError", "cogroup_function"]
