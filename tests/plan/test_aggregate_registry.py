"""The registry of aggregates and the reference interpreter agree on what exists: every
aggregate the engine computes itself has a meaning of its own in ``tests/oracle.py``
(computed there by plain Python, not read from the registry), so the property suite can
draw it.
"""

from __future__ import annotations

from oracle import AGGS

from sparkcq.model.aggregate_functions import BUILTIN, DERIVED_AGGREGATES
from sparkcq.plan.rules.slice_window_aggregates import RANGE_FUNCTIONS, SLICED_FUNCTIONS


def test_every_aggregate_of_the_registry_has_a_meaning_in_the_oracle():
    meant = {call.split("(", 1)[0] for call in AGGS}
    derived = {agg.name for agg in DERIVED_AGGREGATES.values()}
    assert set(BUILTIN) | derived <= meant


def test_panes_compute_every_builtin_and_running_sums_only_what_subtracts():
    assert SLICED_FUNCTIONS == {"count", "sum", "avg", "min", "max"}
    assert RANGE_FUNCTIONS == {"count", "sum", "avg"}
