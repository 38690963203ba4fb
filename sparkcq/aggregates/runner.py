"""The instances of user aggregates, run inside Spark's Python workers.

An aggregate operator hands each cycle's changes of a group, together with the group's
pickled instances, to ``InstanceRunner`` through Arrow (``cogroup(...).applyInArrow``). Per
group it replays the changes in time order, as the built-in aggregates see them:

- an instance of every user aggregate call is created when the group's count of live
  elements leaves 0, and dropped when the count returns to 0;
- at each instant, first every element that enters (``plus``, once per multiplicity),
  then every element that leaves (``minus``); elements whose arguments include a NULL
  count toward the group but are not passed, as with the built-ins;
- after each instant, ``value()`` of every call (NULL when the group is empty).

It returns one *value row* per (group, instant) and one *state row* per group: the count
and the pickled instances after the cycle (``_n = 0`` for a group that emptied). Instances
are pickled with their class by reference to the class the runner carries, so a class
defined in a notebook or a test module need not be importable on the workers.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import math
import pickle
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from sparkcq.errors import ExecutionError
from sparkcq.model.columns import GROUP_HASH, D, N, T


class UserAggregateError(ExecutionError):
    """A user aggregate raised, or returned a value of the wrong type."""


@dataclass(frozen=True)
class CallSpec:
    """One user aggregate call of an operator, as the workers need it."""

    name: str  # the aggregate's name, for messages
    origin: str  # where its code is: ``module:Class line N``
    cls: type
    args: tuple[str, ...]  # input columns of its arguments, in order
    value_column: str
    instance_column: str
    check: Callable[[Any], Any]  # validates and converts a ``value()`` result


def value_check(dtype: pa.DataType, name: str, declared: str) -> Callable[[Any], Any]:
    """A function that returns ``value()``'s result as the declared type's Python value,
    or raises UserAggregateError saying what was returned and what was declared.
    """
    def wrong(v: Any) -> ExecutionError:
        msg = (f"aggregate {name!r}: value() returned {v!r} ({type(v).__name__}), "
               f"but the aggregate is declared RETURNS {declared}")
        return UserAggregateError(msg)

    return typed_value_check(dtype, wrong)


def typed_value_check(dtype: pa.DataType, wrong: Callable[[Any], ExecutionError]
                      ) -> Callable[[Any], Any]:
    """A function that returns a value of user code as ``dtype``'s Python value, or raises
    ``wrong(value)`` (an error saying what was returned and what was declared).
    """
    def check(v: Any) -> Any:
        if v is None:
            return None
        if hasattr(v, "item") and not isinstance(v, dt.datetime | dt.date):  # numpy scalars
            v = v.item()
        if pa.types.is_integer(dtype):
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        elif pa.types.is_floating(dtype):
            if isinstance(v, int | float) and not isinstance(v, bool):
                return float(v)
        elif pa.types.is_decimal(dtype):
            if isinstance(v, decimal.Decimal | int) and not isinstance(v, bool):
                return decimal.Decimal(v)
        elif pa.types.is_boolean(dtype):
            if isinstance(v, bool):
                return v
        elif pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
            if isinstance(v, str):
                return v
        elif pa.types.is_timestamp(dtype):
            if isinstance(v, dt.datetime):
                return v
        elif pa.types.is_date(dtype):
            if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
                return v
        elif pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
            if isinstance(v, bytes | bytearray):
                return bytes(v)
        raise wrong(v)

    return check


class _InstancePickler(pickle.Pickler):
    """Pickles an instance with its class as a reference the runner resolves."""

    def __init__(self, file: io.BytesIO, cls: type):
        super().__init__(file, protocol=5)
        self.cls = cls

    def persistent_id(self, obj: Any) -> str | None:  # noqa: D102
        return "cls" if obj is self.cls else None


class _InstanceUnpickler(pickle.Unpickler):
    def __init__(self, file: io.BytesIO, cls: type):
        super().__init__(file)
        self.cls = cls

    def persistent_load(self, pid: Any) -> type:  # noqa: D102
        return self.cls


def dump_instance(instance: Any, cls: type) -> bytes:
    """The pickled instance, its class by reference to ``cls``."""
    buf = io.BytesIO()
    _InstancePickler(buf, cls).dump(instance)
    return buf.getvalue()


def load_instance(data: bytes, cls: type) -> Any:
    """The instance ``dump_instance`` pickled."""
    return _InstanceUnpickler(io.BytesIO(data), cls).load()


def group_key(values: Sequence[Any]) -> tuple[Any, ...]:
    """A hashable key holding equal what GROUP BY holds equal (``-0.0`` and ``0.0``, every
    NaN), also inside structs and arrays.
    """
    return tuple(_normal(v) for v in values)


def _normal(v: Any) -> Any:
    if isinstance(v, float):
        return "NaN" if math.isnan(v) else v + 0.0  # -0.0 + 0.0 == 0.0
    if isinstance(v, dict):
        return tuple((k, _normal(x)) for k, x in v.items())
    if isinstance(v, list | tuple):
        return tuple(_normal(x) for x in v)
    return v


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A sort key for argument tuples with NULLs first (within one instant and sign)."""
    return tuple((x is not None, x) for x in row)


@dataclass(frozen=True)
class InstanceRunner:
    """The function an aggregate operator's cogroup applies: see the module docstring."""

    keys: tuple[str, ...]
    calls: tuple[CallSpec, ...]
    schema: pa.Schema  # of the output: _g, keys, _t, _n, value columns, instance columns

    def __call__(self, changes: pa.Table, state: pa.Table) -> pa.Table:
        """Value rows and state rows of the groups in one cogroup (one group hash)."""
        rows_of = rows_by_group(changes, self.keys)
        state_of = {k: ix[0] for k, ix in rows_by_group(state, self.keys).items()}
        ts = changes.column(T).to_pylist()
        ds = changes.column(D).to_pylist()
        args = [list(zip(*[changes.column(a).to_pylist() for a in c.args], strict=True))
                for c in self.calls]
        counts = state.column(N).to_pylist() if state.num_rows else []
        saved = [state.column(c.instance_column).to_pylist() if state.num_rows else []
                 for c in self.calls]
        value_rows: list[int] = []  # the changes row giving each value row its keys
        value_ts: list[int] = []
        values: list[list[Any]] = [[] for _ in self.calls]
        state_rows: list[int] = []
        state_n: list[int] = []
        pickles: list[list[bytes | None]] = [[] for _ in self.calls]
        for key, ix in rows_of.items():
            s = state_of.get(key)
            n = counts[s] if s is not None else 0
            inst = [load_instance(saved[j][s], c.cls) for j, c in enumerate(self.calls)] \
                if s is not None and n > 0 else None
            ix.sort(key=lambda i: ts[i])
            start = 0
            while start < len(ix):
                t = ts[ix[start]]
                end = start
                while end < len(ix) and ts[ix[end]] == t:
                    end += 1
                n, inst = self.apply_instant(ix[start:end], ds, args, n, inst)
                value_rows.append(ix[0])
                value_ts.append(t)
                for j, c in enumerate(self.calls):
                    values[j].append(self.read(c, inst[j]) if inst is not None else None)
                start = end
            state_rows.append(ix[0])
            state_n.append(n)
            for j, c in enumerate(self.calls):
                pickles[j].append(dump_instance(inst[j], c.cls) if inst is not None else None)
        return self.output(changes, value_rows, value_ts, values, state_rows, state_n, pickles)

    def apply_instant(self, ix: list[int], ds: list[int], args: list[list[tuple[Any, ...]]],
                      n: int, inst: list[Any] | None) -> tuple[int, list[Any] | None]:
        """The group's count and instances after the changes at one instant."""
        entering = [i for i in ix if ds[i] > 0]
        leaving = [i for i in ix if ds[i] < 0]
        # a deterministic order within the instant (arguments are scalars: comparable)
        entering.sort(key=lambda i: tuple(_order(a[i]) for a in args))
        leaving.sort(key=lambda i: tuple(_order(a[i]) for a in args))
        for i in entering:
            if n == 0:
                inst = [self.create(c) for c in self.calls]
            n += ds[i]
            assert inst is not None
            for j, c in enumerate(self.calls):
                row = args[j][i]
                if None not in row:
                    for _ in range(ds[i]):
                        self.invoke(c, inst[j], "plus", row)
        for i in leaving:
            if inst is None or n + ds[i] < 0:
                msg = "internal error: an element left a group it was not in"
                raise UserAggregateError(msg)
            for j, c in enumerate(self.calls):
                row = args[j][i]
                if None not in row:
                    for _ in range(-ds[i]):
                        self.invoke(c, inst[j], "minus", row)
            n += ds[i]
            if n == 0:
                inst = None
        return n, inst

    @staticmethod
    def create(call: CallSpec) -> Any:
        """A new instance: the group's relation became non-empty."""
        try:
            return call.cls()
        except Exception as e:
            msg = f"aggregate {call.name!r} ({call.origin}): {call.cls.__qualname__}() raised " \
                  f"{type(e).__name__}: {e}{user_frames(e)}"
            raise UserAggregateError(msg) from e

    @staticmethod
    def invoke(call: CallSpec, instance: Any, method: str, row: tuple[Any, ...]) -> None:
        """``instance.plus(*row)`` or ``minus``, naming the aggregate if it raises."""
        try:
            getattr(instance, method)(*row)
        except Exception as e:
            shown = ", ".join(map(repr, row))
            msg = f"aggregate {call.name!r} ({call.origin}): {method}({shown}) raised " \
                  f"{type(e).__name__}: {e}{user_frames(e)}"
            raise UserAggregateError(msg) from e

    @staticmethod
    def read(call: CallSpec, instance: Any) -> Any:
        """``instance.value()``, checked against the declared type."""
        try:
            v = instance.value()
        except Exception as e:
            msg = f"aggregate {call.name!r} ({call.origin}): value() raised " \
                  f"{type(e).__name__}: {e}{user_frames(e)}"
            raise UserAggregateError(msg) from e
        return call.check(v)

    def output(self, changes: pa.Table, value_rows: list[int], value_ts: list[int],
               values: list[list[Any]], state_rows: list[int], state_n: list[int],
               pickles: list[list[bytes | None]]) -> pa.Table:
        """Value rows then state rows, keys taken from the input (types kept exactly)."""
        nv, ns = len(value_rows), len(state_rows)
        taken = changes.select([GROUP_HASH, *self.keys]).take(
            pa.array(value_rows + state_rows, type=pa.int64()))
        cols: dict[str, pa.Array] = {}
        for name in (GROUP_HASH, *self.keys):
            cols[name] = taken.column(name).combine_chunks()
        cols[T] = pa.array(value_ts + [None] * ns, type=pa.int64())
        cols[N] = pa.array([None] * nv + state_n, type=pa.int64())
        for j, c in enumerate(self.calls):
            vtype = self.schema.field(c.value_column).type
            cols[c.value_column] = pa.array(values[j] + [None] * ns, type=vtype)
            cols[c.instance_column] = pa.array([None] * nv + pickles[j], type=pa.binary())
        return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in self.schema],
                                    schema=self.schema)


def user_frames(error: BaseException) -> str:
    """The traceback of the user's code below the call that raised, as lines to append to
    a message (Spark shows a worker's last exception, not what caused it).
    """
    frames = traceback.extract_tb(error.__traceback__)[1:]
    return "".join(f'\n  File "{f.filename}", line {f.lineno}, in {f.name}'
                   + (f"\n    {f.line}" if f.line else "") for f in frames)


def cogroup_function(runner: InstanceRunner) -> Callable[[pa.Table, pa.Table], pa.Table]:
    """``runner`` as the plain two-argument function ``applyInArrow`` expects (it counts
    the parameters of what it is given, ``self`` included).
    """
    def apply(changes: pa.Table, state: pa.Table) -> pa.Table:
        return runner(changes, state)

    return apply


def rows_by_group(table: pa.Table, keys: tuple[str, ...]) -> dict[tuple[Any, ...], list[int]]:
    """Row indices per group (the rows of one group hash may hold several groups)."""
    if not keys:
        return {(): list(range(table.num_rows))} if table.num_rows else {}
    columns = [table.column(k).to_pylist() for k in keys]
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, values in enumerate(zip(*columns, strict=True)):
        groups.setdefault(group_key(values), []).append(i)
    return groups


__all__ = ["CallSpec", "InstanceRunner", "UserAggregateError", "cogroup_function", "dump_instance",
           "group_key", "load_instance", "rows_by_group", "typed_value_check", "user_frames",
           "value_check"]
