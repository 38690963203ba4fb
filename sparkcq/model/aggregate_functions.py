"""The aggregates sparkcq computes itself: one registry entry each, read by the binder, the
rules, the StreamAPAS ``agg`` library, the user aggregates' reserved names and the
server's allowed functions.

``BUILTIN`` holds those every operator implements (count, sum, avg, min, max): what each
takes, and which operators can compute it (from panes before the shuffle; per event over
a RANGE from running sums). ``DERIVED_AGGREGATES`` holds those defined by sums and counts:

An entry says which counts and sums of its argument an aggregate needs (its partials) and
the scalar expression over them that gives its value. The binder turns a call into those
partials and that expression (``plan/bind_aggregates.py``), so every operator computes it as it
computes ``sum`` and ``count``: incrementally as elements enter and leave, from panes
before the shuffle, per event over a RANGE, fused with other queries' aggregates, before a
join with tables; exactly, since sums are exact (``runtime/operators/aggregate.py``), and
shared with any other call that needs the same partials (``var_samp(v)`` and
``stddev_samp(v)`` read one set). The StreamAPAS ``agg`` library and the server's allowed
functions read the same entries.

A variance is ``(n * sum(x * x) - sum(x) ** 2) / (n * (n - 1))`` over exact sums, so it
does not cancel where the mean is large against the spread (three values near 10^9 have a
variance of 2.33, not 0 as in DOUBLE arithmetic).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Takes(Enum):
    """What an aggregate's argument may be."""

    ANYTHING = "anything"  # count: only whether it is null
    NUMBER = "number"  # it adds
    ORDERED = "ordered"  # it compares: numbers, strings, times


@dataclass(frozen=True)
class BuiltinAggregate:
    """An aggregate every operator computes: ``takes`` its argument; ``doc`` the line of
    the StreamAPAS ``agg`` library; ``running``: a per-event RANGE window gives it from
    running sums (a min or a max has none: it needs the window's elements). Every one is
    computed from panes before the shuffle over a window of steps.
    """

    name: str
    takes: Takes
    doc: str
    running: bool


#: the aggregates every operator computes, by name
BUILTIN: dict[str, BuiltinAggregate] = {a.name: a for a in (
    BuiltinAggregate("count", Takes.ANYTHING,
                     "agg.count() or agg.count(x): the number of elements (with x not null)",
                     running=True),
    BuiltinAggregate("sum", Takes.NUMBER, "agg.sum(x): the sum of INTEGER or DOUBLE x",
                     running=True),
    BuiltinAggregate("avg", Takes.NUMBER, "agg.avg(x): the mean of INTEGER or DOUBLE x, a DOUBLE",
                     running=True),
    BuiltinAggregate("min", Takes.ORDERED,
                     "agg.min(x): the least x (INTEGER, DOUBLE, STRING, DATETIME)", running=False),
    BuiltinAggregate("max", Takes.ORDERED,
                     "agg.max(x): the greatest x (INTEGER, DOUBLE, STRING, DATETIME)",
                     running=False),
)}


def adds(func: str) -> bool:
    """Whether the built-in aggregate ``func`` adds its argument (so it must be a number)."""
    builtin = BUILTIN.get(func)
    return builtin is not None and builtin.takes is Takes.NUMBER

#: partials of the variances: the argument's count, sum and sum of squares, in decimals
#: (each term to ten places, each square to six, as Spark rounds a product of two
#: DECIMAL(38, 10)), so that n * sum(x * x) - sum(x) ** 2 is exact where DOUBLEs would
#: cancel (three values near 10^9 a variance of 2.33, not 0)
_X = "CAST({x} AS DECIMAL(38, 10))"
_MOMENTS = (("count", "{x}"), ("sum", _X), ("sum", f"{_X} * {_X}"))


@dataclass(frozen=True)
class DerivedAggregate:
    """An aggregate of one numeric argument computed from counts and sums of expressions of
    it: ``partials`` are (``count`` or ``sum``, an expression of ``{x}``), ``final`` the
    Spark SQL of its value over the partials ``{0}``, ``{1}``, ... (NULL where it has
    none).
    """

    name: str
    doc: str
    partials: tuple[tuple[str, str], ...]
    final: str
    aliases: tuple[str, ...] = ()  # other names SQL calls it by

    @property
    def names(self) -> tuple[str, ...]:
        """Every name it is called by."""
        return (self.name, *self.aliases)


_VAR = "CAST({0} * {2} - {1} * {1} AS DOUBLE) / ({0} * ({0} - %s))"

VAR_SAMP = DerivedAggregate(
    "var_samp", "the sample variance of the numbers x (NULL for fewer than two)", _MOMENTS,
    "CASE WHEN {0} > 1 THEN " + _VAR % 1 + " END", aliases=("variance",))
STDDEV_SAMP = DerivedAggregate(
    "stddev_samp", "the sample standard deviation of the numbers x (NULL for fewer than two)",
    _MOMENTS, "CASE WHEN {0} > 1 THEN sqrt(" + _VAR % 1 + ") END", aliases=("stddev",))
VAR_POP = DerivedAggregate(
    "var_pop", "the population variance of the numbers x", _MOMENTS,
    "CASE WHEN {0} > 0 THEN " + _VAR % 0 + " END", aliases=("variance_pop",))
STDDEV_POP = DerivedAggregate(
    "stddev_pop", "the population standard deviation of the numbers x", _MOMENTS,
    "CASE WHEN {0} > 0 THEN sqrt(" + _VAR % 0 + ") END")

#: every derived aggregate, by each name it is called by
DERIVED_AGGREGATES: dict[str, DerivedAggregate] = {
    name: agg for agg in (VAR_SAMP, STDDEV_SAMP, VAR_POP, STDDEV_POP) for name in agg.names}
