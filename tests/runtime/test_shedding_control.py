"""The driver-side control of a shedding join (``runtime/operators/shedding.py``), without
Spark: which share of each lag bucket a cycle's probers meet, and the work they skip.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkcq.plan.options import ShedMode
from sparkcq.runtime.operators.shedding import (
    BOOST,
    LEAST_Z,
    RECENT,
    SLOTS,
    bucket_order,
    fixed_seconds,
    fractions,
    live_elements,
    met,
    next_z,
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
    # a part of a bucket in whole slots: 3 of bucket 1's 20 is 2.4 of its 16 slots
    assert fractions([2, 0, 1, 3], [5, 20, 10, 5], 0.45) == (1.0, 2 / SLOTS, 1.0, 0.0)
    assert fractions([0, 1], [3, 1], 1.0) == (1.0, 1.0)
    # nothing measured yet: every bucket weighs alike
    assert fractions([1, 0, 2, 3], [], 0.5) == (1.0, 1.0, 0.0, 0.0)


@given(work=st.lists(st.integers(0, 1000).map(float), min_size=1, max_size=12),
       z=st.floats(0.01, 1.0), seed=st.integers(0, 10**6))
def test_the_shares_meet_z_of_the_work_taking_buckets_in_order(work, z, seed):
    order = bucket_order(ShedMode.RANDOM, len(work), seed)
    shares = fractions(order, work, z)
    assert all(0 <= f <= 1 for f in shares)
    weights = work if sum(work) > 0 else [1.0] * len(work)
    done = sum(f * w for f, w in zip(shares, weights, strict=True))
    # z of the work, but for the partly taken bucket, taken in whole slots
    assert abs(done - z * sum(weights)) <= max(weights) / (2 * SLOTS) + 1e-9
    assert all(round(f * SLOTS) == f * SLOTS for f in shares)
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


def test_z_is_the_share_of_the_coming_work_that_fits_the_target():
    # 1,000 partners in 5 - 1 s: 4 ms each; 0.5 x 2 s - 1 s fixed leaves no room: z falls
    # to the least; with 0.5 s fixed, 0.5 s of room: 111 partners of the next 1,000
    z, why = next_z(0.8, 5.0, 2.0, fixed=1.0, met=1000, expected=1000)
    assert z == LEAST_Z
    z, why = next_z(0.8, 5.0, 2.0, fixed=0.5, met=1000, expected=1000)
    assert z == pytest.approx(0.5 / 4.5)
    assert why == ("1,000 partners met in 5.00 s (0.50 s of it fixed), 1,000 to meet at "
                   "z = 1 next: 0.11 of them fit in 1 s of the budget of 2 s")
    # within the budget, but a burst waits: z falls before the cycle that would overrun
    z, why = next_z(0.5, 1.0, 2.0, fixed=0.5, met=500, expected=4000)
    assert z == pytest.approx(0.5 / 4)


def test_z_grows_back_by_at_most_the_boost_and_only_to_what_fits():
    assert next_z(0.2, 0.6, 2.0, fixed=0.5, met=100, expected=500)[0] == \
        pytest.approx(0.2 * BOOST)
    # 0.5 s of room for 1 ms a partner: 500 of the 2,000 partners
    assert next_z(0.2, 1.1, 2.0, fixed=0.5, met=600, expected=2000)[0] == \
        pytest.approx(0.25)
    assert next_z(0.9, 0.6, 2.0, fixed=0.5, met=100, expected=100)[0] == 1.0
    # the fixed part is never taken for more than 0.9 of the cycle
    assert next_z(0.5, 1.0, 2.0, fixed=3.0, met=100, expected=100)[0] == 0.5 * BOOST


def test_without_a_measure_of_the_work_z_follows_the_time():
    z, why = next_z(1.0, 4.0, 2.0)
    assert z == pytest.approx(0.5)
    assert why == ("the cycle took 4.00 s, over the budget of 2 s: 50% of its input was "
                   "processed in time")
    assert next_z(0.5, 0.9, 2.0, met=100, expected=None)[0] == pytest.approx(0.5 * BOOST)
    assert next_z(0.5, 1.5, 2.0) == (0.5, "")
    assert next_z(0.001, 9.0, 2.0)[0] == LEAST_Z


def test_the_fixed_part_is_the_quickest_recent_cycle():
    assert fixed_seconds([3.0, 2.0, 2.5]) == 2.0
    assert fixed_seconds([3.0, 2.0]) == 0.0
    assert fixed_seconds([0.5] + [2.0] * RECENT) == 2.0
