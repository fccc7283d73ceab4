"""Scheduling, backpressure, admission control, retries, dynamic sampling: pure, no Ray."""

import random

from pipelines.rollout.schedule import Limits, Scheduler, is_stale, may_start, pick_worker
from tests.rollout.helpers import group, row


def limits(**kw) -> Limits:
    base = dict(workers=2, groups_per_worker=10, buffer_groups=100, batch_groups=2, max_staleness=None,
                drop_equal_rewards=True)
    return Limits(**{**base, **kw})


def drain(s: Scheduler) -> list:
    out = []
    while (a := s.next_assignment()) is not None:
        out.append(a)
    return out


def mixed(task, versions=(0, 0)):
    return group(task.group_id, (0.0, 1.0), versions)


def test_may_start_counts_batches_against_versions():
    assert may_start(0, 0, batch_groups=4, max_staleness=0)
    assert may_start(3, 0, 4, 0) and not may_start(4, 0, 4, 0)
    assert may_start(7, 0, 4, 1) and not may_start(8, 0, 4, 1)
    assert may_start(8, 1, 4, 1)
    assert may_start(10**6, 0, 4, None)


def test_pick_worker_least_loaded_with_room_avoiding_the_failed_one():
    assert pick_worker([2, 1, 3], capacity=3) == 1
    assert pick_worker([3, 3], capacity=3) is None
    assert pick_worker([0, 2], capacity=3, avoid=0) == 1
    assert pick_worker([0, 3], capacity=3, avoid=0) == 0  # the only one with room


def test_is_stale_uses_the_oldest_turn():
    g = group("a#1", (0.0, 1.0), versions=(1, 3))
    assert g.version_min == 1 and g.version_max == 3
    assert not is_stale(g, version=2, max_staleness=1)
    assert is_stale(g, version=3, max_staleness=1)
    assert not is_stale(g, version=99, max_staleness=None)


def test_buffer_bound_holds_finished_and_in_flight_groups():
    s = Scheduler((row(i) for i in range(10)), 2, limits(buffer_groups=3))
    first = drain(s)
    assert len(first) == 3 and s.held == 3
    s.on_result(mixed(first[0][0]), 0)
    assert s.buffered == 1 and drain(s) == []  # finished groups still count against the bound
    assert len(s.take(1)) == 1
    assert len(drain(s)) == 1 and s.counters.max_buffered == 3


def test_worker_capacity_spreads_groups():
    s = Scheduler((row(i) for i in range(10)), 2, limits(groups_per_worker=2))
    assigned = drain(s)
    assert sorted(w for _, w in assigned) == [0, 0, 1, 1] and s.loads == [2, 2]


def test_admission_control_and_dynamic_sampling_keep_batches_filling():
    s = Scheduler((row(i) for i in range(20)), 2, limits(batch_groups=2, max_staleness=0))
    a = drain(s)
    assert len(a) == 2  # batch 0 only, at version 0
    assert s.on_result(group(a[0][0].group_id, (1.0, 1.0)), 0) == "filtered"
    b = drain(s)
    assert len(b) == 1  # the filtered group's place is refilled
    s.on_result(mixed(a[1][0]), 0)
    s.on_result(mixed(b[0][0]), 0)
    assert [g.group_id for g in s.take(2)] == [a[1][0].group_id, b[0][0].group_id]
    assert drain(s) == []
    s.version = 1
    assert len(drain(s)) == 2
    assert s.counters.filtered == 1 and s.counters.started == 5


def test_too_stale_groups_are_dropped_at_take_and_counted():
    s = Scheduler((row(i) for i in range(4)), 2, limits(max_staleness=1, batch_groups=1))
    a = drain(s)
    s.on_result(mixed(a[0][0], versions=(0, 0)), 0)
    s.on_result(mixed(a[1][0], versions=(1, 2)), 0)
    s.version = 2
    got = s.take(1)
    assert [g.group_id for g in got] == [a[1][0].group_id]
    assert s.counters.stale == 1 and s.counters.delivered == 1


def test_worker_death_reruns_elsewhere_and_late_results_are_not_delivered_twice():
    s = Scheduler((row(i) for i in range(2)), 2, limits(groups_per_worker=1))
    (t0, w0), (t1, w1) = drain(s)
    assert s.on_failure(t0.group_id, 0)
    s.on_result(mixed(t1), 0)
    (retry, w), = drain(s)
    assert retry.group_id == t0.group_id and retry.attempt == 1 and w == w1 != w0
    assert s.on_result(mixed(t0), 0) == "duplicate"  # the dead attempt's result, if any
    assert s.on_result(mixed(retry), 1) == "kept"
    assert not s.on_failure(t0.group_id, 1)
    got = s.take(2)
    assert sorted(g.group_id for g in got) == sorted([t0.group_id, t1.group_id])
    assert drain(s) == [] and s.finished and s.take(1) == []
    assert s.counters.retried == 1 and s.counters.duplicates == 2


def test_errors_free_their_place_and_last_partial_batch_is_delivered():
    s = Scheduler((row(i) for i in range(3)), 2, limits(batch_groups=2, max_staleness=0))
    a = drain(s)
    assert s.on_error(a[0][0].group_id, 0) and s.counters.failed == 1
    b = drain(s)
    assert len(b) == 1
    s.on_result(mixed(a[1][0]), 0)
    s.on_result(mixed(b[0][0]), 0)
    assert len(s.take(2)) == 2
    s.version = 1
    assert drain(s) == [] and s.finished
    assert s.take(2) == []


def test_keep_equal_rewards_when_dynamic_sampling_is_off():
    s = Scheduler([row(0)], 2, limits(drop_equal_rewards=False))
    (t, _), = drain(s)
    assert s.on_result(group(t.group_id, (0.0, 0.0)), 0) == "kept"
    drain(s)
    assert s.finished and len(s.take(4)) == 1  # the last, partial batch


def test_random_interleavings_deliver_every_row_once_within_bounds():
    for seed in range(20):
        rng = random.Random(seed)
        n, bound = 30, 5
        s = Scheduler((row(i) for i in range(n)), 2, limits(buffer_groups=bound, groups_per_worker=2))
        running, delivered = [], []
        while not (s.finished and s.buffered == 0):
            running += drain(s)
            assert s.held <= bound and all(load <= 2 for load in s.loads)
            if running and rng.random() < 0.7:
                task, _ = running.pop(rng.randrange(len(running)))
                if rng.random() < 0.2:
                    s.on_failure(task.group_id, task.attempt)
                else:
                    s.on_result(group(task.group_id, (0.0, rng.choice((0.0, 1.0)))), task.attempt)
            else:
                delivered += s.take(rng.randint(1, 3))
        kept = [g.sample_id for g in delivered]
        assert len(kept) == len(set(kept)) == n - s.counters.filtered
        assert s.counters.started == n and not s.in_flight


def test_groups_dropped_in_a_row_and_their_reward_are_counted_until_one_is_kept():
    s = Scheduler((row(i) for i in range(6)), 2, limits())
    a = drain(s)
    for task, _ in a[:3]:
        assert s.on_result(group(task.group_id, (1.0, 1.0)), 0) == "filtered"
    assert (s.counters.filtered_in_a_row, s.counters.filtered_reward) == (3, 3.0)
    s.on_result(mixed(a[3][0]), 0)
    assert (s.counters.filtered_in_a_row, s.counters.filtered) == (0, 3)
    s.on_result(group(a[4][0].group_id, (0.0, 0.0)), 0)
    assert (s.counters.filtered_in_a_row, s.counters.filtered_reward) == (1, 3.0)
