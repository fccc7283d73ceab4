"""Which group runs next, on which worker, and which finished groups reach the consumer. Pure.

The Ray glue (service.py) asks `next_assignment()` whenever a worker may have room, reports
`on_result` / `on_failure`, and serves `take(n)`. Everything that decides (backpressure,
admission control, retries, duplicates, dynamic sampling, staleness) is here, testable
without Ray.

Admission control follows AReaL: with one policy version per consumed batch of B groups,
the k-th kept group lands in batch k // B and is trained at version k // B, so it may start
at version v only if k // B <= v + max_staleness. Dropped groups (all-equal rewards, too
stale) free their place, so sampling continues until a batch is full instead of stalling.
A group that still ends up too stale (it finished late) is dropped at `take` and counted.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pipelines.rollout.trajectory import Group


@dataclass(frozen=True)
class GroupTask:
    group_id: str
    row: Any  # a TaskRow: sample_id, question, answers, answer_kind, doc_id or context
    group_size: int
    attempt: int = 0


@dataclass(frozen=True)
class Limits:
    workers: int
    groups_per_worker: int
    buffer_groups: int
    batch_groups: int
    max_staleness: int | None
    drop_equal_rewards: bool


@dataclass
class Counters:
    started: int = 0  # groups started (a re-run is not a new start)
    kept: int = 0  # groups that entered the buffer
    delivered: int = 0
    filtered: int = 0  # all rewards equal (dynamic sampling)
    filtered_in_a_row: int = 0  # since the last kept group: RL without signal when it keeps growing
    filtered_reward: float = 0.0  # sum of the filtered groups' (equal) rewards: their mean tells all-right from all-wrong
    stale: int = 0  # too stale when taken
    retried: int = 0  # re-runs after a worker failure
    failed: int = 0  # groups given up on (bad row, repeated worker deaths): quarantined
    duplicates: int = 0  # results of an attempt that was already settled
    max_buffered: int = 0  # most groups held (finished + in flight) at any time


@dataclass
class Flight:
    task: GroupTask
    worker: int


def may_start(live_groups: int, version: int, batch_groups: int, max_staleness: int | None) -> bool:
    """Whether the next group could still be trained within max_staleness versions."""
    return max_staleness is None or live_groups // batch_groups <= version + max_staleness


def is_stale(group: Group, version: int, max_staleness: int | None) -> bool:
    return max_staleness is not None and version - group.version_min > max_staleness


def pick_worker(loads: list[int], capacity: int, avoid: int | None = None) -> int | None:
    """The least-loaded worker with room, preferring any worker other than `avoid`."""
    order = sorted(range(len(loads)), key=lambda w: (w == avoid, loads[w], w))
    return next((w for w in order if loads[w] < capacity), None)


class Scheduler:
    def __init__(self, rows: Iterable[Any], group_size: int, limits: Limits, version: int = 0):
        self._rows: Iterator[Any] = iter(rows)
        self._group_size = group_size
        self.limits = limits
        self.version = version
        self.counters = Counters()
        self.loads = [0] * limits.workers
        self.in_flight: dict[str, Flight] = {}
        self._retry: deque[tuple[GroupTask, int]] = deque()
        self._buffer: deque[Group] = deque()
        self._seq = 0
        self.exhausted = False
        self.settled: list[str] = []  # group ids that left without delivery (filtered, stale, failed)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    @property
    def held(self) -> int:
        """Finished plus in-flight groups: what the buffer bound limits."""
        return len(self._buffer) + len(self.in_flight)

    @property
    def finished(self) -> bool:
        return self.exhausted and not self._retry and not self.in_flight

    def live_groups(self) -> int:
        c = self.counters
        return c.started - c.filtered - c.stale - c.failed

    def next_assignment(self) -> tuple[GroupTask, int] | None:
        """(task, worker) to dispatch now, or None: buffer full, workers busy, admission or no work."""
        if self.held >= self.limits.buffer_groups:
            return None
        if self._retry:
            task, avoid = self._retry[0]
            worker = pick_worker(self.loads, self.limits.groups_per_worker, avoid)
            if worker is None:
                return None
            self._retry.popleft()
            return self._launch(task, worker)
        worker = pick_worker(self.loads, self.limits.groups_per_worker)
        if worker is None or self.exhausted:
            return None
        if not may_start(self.live_groups(), self.version, self.limits.batch_groups, self.limits.max_staleness):
            return None
        row = next(self._rows, None)
        if row is None:
            self.exhausted = True
            return None
        self.counters.started += 1
        self._seq += 1
        task = GroupTask(f"{row.sample_id}#{self._seq}", row, self._group_size)
        return self._launch(task, worker)

    def _launch(self, task: GroupTask, worker: int) -> tuple[GroupTask, int]:
        self.in_flight[task.group_id] = Flight(task, worker)
        self.loads[worker] += 1
        self.counters.max_buffered = max(self.counters.max_buffered, self.held)
        return task, worker

    def _settle(self, group_id: str, attempt: int) -> Flight | None:
        flight = self.in_flight.get(group_id)
        if flight is None or flight.task.attempt != attempt:
            self.counters.duplicates += 1
            return None
        del self.in_flight[group_id]
        self.loads[flight.worker] -= 1
        return flight

    def on_result(self, group: Group, attempt: int) -> str:
        """'kept', 'filtered' or 'duplicate'."""
        if self._settle(group.group_id, attempt) is None:
            return "duplicate"
        if self.limits.drop_equal_rewards and group.all_equal:
            self.counters.filtered += 1
            self.counters.filtered_in_a_row += 1
            self.counters.filtered_reward += group.trajectories[0].reward if group.trajectories else 0.0
            self.settled.append(group.group_id)
            return "filtered"
        self._buffer.append(group)
        self.counters.kept += 1
        self.counters.filtered_in_a_row = 0
        return "kept"

    def on_failure(self, group_id: str, attempt: int) -> bool:
        """The worker running this attempt died: queue a re-run, preferably elsewhere."""
        flight = self._settle(group_id, attempt)
        if flight is None:
            return False
        task = flight.task
        self._retry.append((GroupTask(task.group_id, task.row, task.group_size, task.attempt + 1), flight.worker))
        self.counters.retried += 1
        return True

    def on_error(self, group_id: str, attempt: int) -> bool:
        """The group cannot be run (its caller quarantines it with the reason)."""
        if self._settle(group_id, attempt) is None:
            return False
        self.counters.failed += 1
        self.settled.append(group_id)
        return True

    def take(self, n: int) -> list[Group]:
        """n complete, fresh groups, or [] if fewer are ready; what remains once all work is done."""
        while self._buffer and is_stale(self._buffer[0], self.version, self.limits.max_staleness):
            self.settled.append(self._buffer.popleft().group_id)
            self.counters.stale += 1
        fresh = [g for g in self._buffer if not is_stale(g, self.version, self.limits.max_staleness)]
        if len(fresh) < n and not (self.finished and fresh):
            return []
        out: list[Group] = []
        while self._buffer and len(out) < n:
            g = self._buffer.popleft()
            if is_stale(g, self.version, self.limits.max_staleness):
                self.counters.stale += 1
                self.settled.append(g.group_id)
            else:
                out.append(g)
        self.counters.delivered += len(out)
        return out
