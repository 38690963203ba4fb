"""The driver-side control of a shedding join (``runtime/operators/shedding.py``), without
Spark: which share of each lag bucket a cycle's probers meet, and the work they skip; what
the join learns from its commit's counts.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkcq.plan.options import ShedMode
from sparkcq.runtime.operators.interval_join import (
    SUB_WINDOW_CLASSES,
    CycleCounts,
    by_sub_window,
)
from sparkcq.runtime.operators.shedding import (
    BOOST,
    FIT_AFTER,
    LEAST_Z,
    RECENT,
    SAMPLE,
    SAMPLE_Z,
    CycleCost,
    CycleLoad,
    bucket_order,
    fit_cycle_cost,
    fractions,
    live_elements,
    met,
    next_z,
    sample_share,
    slice_length,
    work_per_bucket,
)


def test_a_window_is_cut_into_basic_sub_windows_rounded_up():
    assert slice_length(60, 10) == 6
    assert slice_length(61, 10) == 7
    assert slice_length(3, 10) == 1


def test_work_per_bucket_by_hand():
    # probers in sub-windows 5 (two) and 6 (one); partners in 4, 5, 6
    probers, partners = {5: 2, 6: 1}, {4: 10, 5: 3, 6: 7}
    # bucket 0: 2*3 + 1*7, half of it (about half the partners in a prober's own
    # sub-window start after it); bucket 1: 2*10 + 1*3; bucket 2: 0 + 1*10; bucket 3
    # (the oldest, also half): nothing
    assert work_per_bucket(probers, partners, 4) == (6.5, 23.0, 10.0, 0.0)
    assert work_per_bucket({0: 2}, {-2: 4}, 3) == (0.0, 0.0, 4.0)


def test_whole_buckets_in_order_then_a_part_of_the_next():
    # z = 0.5 of 40: bucket 2 (10) and bucket 0 (5) whole, then 5 of bucket 1's 20
    assert fractions([2, 0, 1, 3], [5, 20, 10, 5], 0.5) == (1.0, 0.25, 1.0, 0.0)
    # any part of a bucket: 3 of bucket 1's 20
    assert fractions([2, 0, 1, 3], [5, 20, 10, 5], 0.45) == pytest.approx((1.0, 0.15, 1.0, 0.0))
    assert fractions([0, 1], [3, 1], 1.0) == (1.0, 1.0)
    # nothing measured yet: every bucket weighs alike
    assert fractions([1, 0, 2, 3], [], 0.5) == (1.0, 1.0, 0.0, 0.0)


@given(work=st.lists(st.integers(0, 1000).map(float), min_size=1, max_size=12),
       z=st.floats(0.001, 1.0), seed=st.integers(0, 10**6))
def test_the_shares_meet_z_of_the_work_taking_buckets_in_order(work, z, seed):
    order = bucket_order(ShedMode.RANDOM, len(work), seed)
    shares = fractions(order, work, z)
    assert all(0 <= f <= 1 for f in shares)
    weights = work if sum(work) > 0 else [1.0] * len(work)
    done = sum(f * w for f, w in zip(shares, weights, strict=True))
    assert done == pytest.approx(z * sum(weights))
    taken = [shares[j] for j in order]
    # a prefix of whole buckets, at most one partly taken, then none (empty buckets aside)
    partly = [f for f in taken if 0 < f < 1]
    assert len(partly) <= 1
    first_short = next((i for i, f in enumerate(taken) if f < 1), len(taken))
    assert all(f == 0 or weights[order[i]] == 0 for i, f in enumerate(taken)
               if i > first_short)
    processed, skipped = met(weights, shares)
    assert processed + skipped == round(sum(weights))


def test_random_order_is_a_permutation_fixed_by_its_seed():
    orders = {tuple(bucket_order(ShedMode.RANDOM, 11, seed)) for seed in range(20)}
    assert all(sorted(o) == list(range(11)) for o in orders)
    assert len(orders) > 10
    assert bucket_order(ShedMode.RANDOM, 11, 7) == bucket_order(ShedMode.RANDOM, 11, 7)


def test_adaptive_order_follows_the_priorities_newest_first_on_ties():
    assert bucket_order(ShedMode.ADAPTIVE, 5, 0, [0.1, 0.0, 2.0, 0.5, 0.5]) == [2, 3, 4, 0, 1]
    assert bucket_order(ShedMode.ADAPTIVE, 3, 0) == [0, 1, 2]


def test_live_elements_add_the_new_and_drop_sub_windows_that_ended():
    # sub-windows of 10, elements lasting 30: sub-window 2's last element ends before 60,
    # sub-window 3's may end at 69
    kept = ((2, 5), (3, 4), (5, 1))
    assert live_elements(kept, {5: 2, 7: 3}, 60, 10, 30) == ((3, 4), (5, 3), (7, 3))
    assert live_elements((), {}, 0, 10, 30) == ()


COST = CycleCost(fixed=0.5, per_row=1e-4, per_partner=1e-3, cycles=8)


def test_z_is_the_share_of_the_coming_partners_that_fits_beside_the_floor():
    # 2,000 rows: a floor of 0.5 + 0.2 s; half the budget of 2 s leaves 0.3 s, 300 of the
    # 1,000 partners at 1 ms each
    z, why = next_z(0.8, 1.5, 2.0, cost=COST, coming=CycleLoad(2000, 1000))
    assert z == pytest.approx(0.3)
    assert why == ("a cycle costs 0.50 s, 100.0 us a row and 1000000.00 ns a partner "
                   "(fitted to 8 cycles); 2,000 rows wait, 1,000 partners to meet at z = 1: "
                   "0.30 of them fit in 1 s of the budget of 2 s")
    # a burst waits: z falls before the cycle that would run over
    assert next_z(0.5, 0.9, 2.0, cost=COST, coming=CycleLoad(2000, 4000))[0] == \
        pytest.approx(0.075)
    # the floor alone is over the target: the least z
    assert next_z(0.5, 0.9, 2.0, cost=COST, coming=CycleLoad(6000, 4000))[0] == LEAST_Z


def test_z_grows_back_by_at_most_the_boost():
    assert next_z(0.1, 0.8, 2.0, cost=COST, coming=CycleLoad(2000, 100))[0] == \
        pytest.approx(0.1 * BOOST)
    assert next_z(0.9, 0.8, 2.0, cost=COST, coming=CycleLoad(2000, 100))[0] == 1.0
    # no time per partner in the fit (too few met to tell): z grows after a cycle under
    # the target, and holds after one over it
    flat = CycleCost(1.0, 1e-4, 0.0, 8)
    z, why = next_z(0.2, 0.8, 2.0, cost=flat, coming=CycleLoad(2_000, 10**9))
    assert z == pytest.approx(0.2 * BOOST)
    assert why.endswith("no time per partner is seen, and the last cycle took 0.80 s, under 1 s")
    assert next_z(0.2, 3.0, 2.0, cost=flat, coming=CycleLoad(20_000, 10**9)) == (0.2, "")


def test_under_the_target_z_holds_or_tries_a_little_more_than_the_cost_says():
    # 2 s of floor, 100 s of partners at z = 1: 0.02 fit in 4 s; at 0.025 the model
    # predicts 4.5 s
    cost = CycleCost(2.0, 0.0, 1e-7, 8)
    coming = CycleLoad(20_000, 1e9)
    # the last cycle took 3 s, under the target: z tries 1.2 x as much, predicted within
    # 0.65 of the budget of 8 s (5.2 s)
    z, why = next_z(0.025, 3.0, 8.0, cost=cost, coming=coming)
    assert z == pytest.approx(0.03)
    assert why.endswith("0.02 of them fit in 4 s of the budget of 8 s, but the last cycle "
                        "took 3.00 s, under 4 s: 0.03 of them are tried (predicted 5.00 s)")
    # one more step is predicted beyond 5.2 s: z holds
    assert next_z(0.03, 3.0, 8.0, cost=cost, coming=coming) == (0.03, "")
    # the last cycle took the target or more: z falls to what fits
    assert next_z(0.03, 4.5, 8.0, cost=cost, coming=coming)[0] == pytest.approx(0.02)


def test_before_a_cost_is_fitted_the_met_partners_take_all_the_time():
    # 1,000 partners in 2 s: 2 ms each; 1 s for the next 1,000: half of them
    z, why = next_z(0.8, 2.0, 2.0, met=1000, coming=CycleLoad(10, 1000))
    assert z == pytest.approx(0.5)
    assert why.startswith("1,000 partners met in 2.00 s; 10 rows wait")


def test_without_a_measure_of_the_work_z_follows_the_time():
    z, why = next_z(1.0, 4.0, 2.0)
    assert z == pytest.approx(0.5)
    assert why == ("the cycle took 4.00 s, over the budget of 2 s: 50% of its input was "
                   "processed in time")
    assert next_z(0.5, 0.9, 2.0, met=100, coming=None)[0] == pytest.approx(0.5 * BOOST)
    assert next_z(0.5, 1.5, 2.0) == (0.5, "")
    assert next_z(LEAST_Z, 9.0, 2.0)[0] == LEAST_Z


def seconds_of(rows: int, partners: float) -> float:
    return 0.5 + 1e-4 * rows + 1e-6 * partners


def test_the_cost_of_a_cycle_is_fitted_to_recent_cycles():
    loads = [CycleLoad(r, p) for r, p in [(1000, 5e5), (3000, 1e5), (2000, 2e6),
                                         (500, 1e6), (4000, 3e6)]]
    cost = fit_cycle_cost([(load, seconds_of(load.rows, load.partners)) for load in loads])
    assert cost is not None and cost.cycles == 5
    assert (cost.fixed, cost.per_row, cost.per_partner) == pytest.approx((0.5, 1e-4, 1e-6))
    assert fit_cycle_cost([(load, 1.0) for load in loads[:FIT_AFTER - 1]]) is None
    # only the last RECENT cycles count
    old = [(CycleLoad(100, 100.0), 50.0)] * 3
    recent = [(load, seconds_of(load.rows, load.partners)) for load in loads * RECENT]
    assert fit_cycle_cost(old + recent[:RECENT]) == fit_cycle_cost(recent[:RECENT])


def test_a_part_of_the_cost_that_would_be_negative_is_left_out():
    # more partners, less time: noise, not a saving; fitted without that part
    history = [(CycleLoad(r, p), 1.0 + 1e-4 * r - 1e-9 * p)
               for r, p in [(1000, 5e6), (3000, 1e6), (2000, 9e6), (500, 2e6), (4000, 4e6)]]
    cost = fit_cycle_cost(history)
    assert cost is not None and cost.per_partner == 0.0
    assert cost.per_row > 0


def test_the_sample_met_shrinks_with_z_to_a_fifth_of_it():
    """At z = 0.2 and above the probers meet the whole sample (5% of the elements); below,
    z / 0.2 of it, never less than a fifth: at z = 0.1 half of it, at 0.01 a fifth.
    """
    assert sample_share(1.0) == sample_share(SAMPLE_Z) == SAMPLE
    assert sample_share(0.1) == pytest.approx(SAMPLE / 2)
    assert sample_share(LEAST_Z) == pytest.approx(SAMPLE * SAMPLE_Z)


def test_new_elements_by_sub_window_from_the_commits_counts_by_class():
    """The commit counts a cycle's new elements in eight classes (sub-window modulo 8),
    with their least and greatest sub-window: exact while they span fewer than eight.
    """
    classes = [0] * SUB_WINDOW_CLASSES
    classes[14 % SUB_WINDOW_CLASSES], classes[15 % SUB_WINDOW_CLASSES] = 5, 2
    assert by_sub_window([14, 15, *classes]) == {14: 5, 15: 2}
    assert by_sub_window([None, None, *[0] * SUB_WINDOW_CLASSES]) == {}
    # nine sub-windows apart: two of them share a class, the counts cannot tell them apart
    assert by_sub_window([14, 14 + SUB_WINDOW_CLASSES, *classes]) is None
    # negative sub-windows: the class is the one Spark's pmod gives
    classes = [0] * SUB_WINDOW_CLASSES
    classes[-3 % SUB_WINDOW_CLASSES] = 4
    assert by_sub_window([-3, -3, *classes]) == {-3: 4}


def test_a_cycles_counts_are_handed_over_once_all_came():
    handed = []
    counts = CycleCounts(handed.append)
    side, sample = counts.expect("side0"), counts.expect("sample")
    counts.expect_nothing_more()
    side({3: 1})
    assert handed == []
    sample({})
    assert handed == [{"side0": {3: 1}, "sample": {}}]
    nothing = CycleCounts(handed.append)
    nothing.expect_nothing_more()
    assert handed[-1] == {}
