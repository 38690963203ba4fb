"""Aggregates defined by sums and counts: one registry entry each, exact everywhere.

An entry says which counts and sums of its argument an aggregate needs (its partials) and
the scalar expression over them that gives its value. The binder turns a call into those
partials and that expression (``plan/binder.py``), so every operator computes it as it
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
