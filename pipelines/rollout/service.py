"""The rollout service: N worker actors, the scheduler, the trajectory buffer, one consumer call.

    with RolloutService(cfg, rows).start() as rollout:
        while batch := rollout.take(cfg.rollout.batch_groups):   # complete groups only
            ...train...
            rollout.push_weights("/ckpt/v1", version=1)          # between turns, nothing dropped

A background thread dispatches groups as the scheduler allows and collects finished
ones; the consumer only calls `take`. Thin glue: every decision is in schedule.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import ray

from pipelines import runtime
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.models import check_remote_ref
from pipelines.rollout.schedule import Limits, Scheduler
from pipelines.rollout.trajectory import Group
from pipelines.rollout.core import RolloutSpec
from pipelines.rollout.worker import close_workers, start_workers


def limits_of(cfg: Config, workers: int) -> Limits:
    r = cfg.rollout
    per_worker = max(1, -(-r.loops_per_worker // r.group_size))
    return Limits(workers, per_worker, r.buffer_groups, r.batch_groups, r.max_staleness, r.drop_equal_rewards)


@dataclass(frozen=True)
class Quarantined:
    """A row that could not run, reported the moment it is given up on."""

    sample_id: str
    reason: str


def failure_reason(err: BaseException) -> str:
    cause = getattr(err, "cause", None) or err
    lines = str(cause).strip().splitlines()
    return f"{cause.__class__.__name__}: {lines[-1] if lines else ''}"


class RolloutService:
    def __init__(self, cfg: Config, rows: Iterable[Any], version: int = 0, weights: str | None = None,
                 workers: list | None = None, spec: RolloutSpec | None = None):
        """workers: already started actors (start_workers) to reuse; the service then leaves them running.
        spec: how groups are sampled (default: from cfg.rollout)."""
        r = cfg.rollout
        self.cfg = cfg
        self.spec = spec or RolloutSpec(r.temperature, r.top_p, r.reward, turn_cost=cfg.learn.turn_cost,
                                        ground_cost=cfg.learn.ground_cost)
        self.sched = Scheduler(rows, r.group_size, limits_of(cfg, len(workers or []) or r.workers), version)
        self.quarantine: list[tuple[str, str]] = []  # (sample_id, reason) of groups that failed
        self._policy = (weights, version)
        self._cond = threading.Condition()
        self._refs: dict[Any, tuple[str, int, int]] = {}  # ref -> (group_id, attempt, worker)
        self._loads: list[tuple[Any, str]] = []  # weight loads not yet settled: (ref, path)
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self._own = workers is None
        self.workers: list = list(workers or [])

    def start(self) -> RolloutService:
        runtime.connect()
        if self._own:
            self.workers = start_workers(self.cfg, None, self._policy[1], self._policy[0])
        ray.get([w.ready.remote(*self._policy) for w in self.workers])
        self._thread = threading.Thread(target=self._pump, name="rollout-pump", daemon=True)
        self._thread.start()
        return self

    def __enter__(self) -> RolloutService:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def take(self, n_groups: int, timeout: float | None = None) -> list[Group]:
        """n complete groups (fewer only at the very end; [] when all work is done)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                if self._error is not None:
                    raise self._error
                groups = self.sched.take(n_groups)
                if groups or (self.sched.finished and self.sched.buffered == 0):
                    self._cond.notify_all()
                    return groups
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(f"no batch of {n_groups} groups within {timeout} s")
                self._cond.wait(0.5)

    def stream(self) -> Iterator[Group | Quarantined]:
        """Every group and every quarantined row as it arrives, until all work is done."""
        seen = 0
        while True:
            with self._cond:
                while True:
                    if self._error is not None:
                        raise self._error
                    groups, failed = self.sched.take(1), self.quarantine[seen:]
                    done = self.sched.finished and self.sched.buffered == 0
                    if groups or failed or done:
                        self._cond.notify_all()
                        break
                    self._cond.wait(0.5)
            seen += len(failed)
            yield from (Quarantined(*q) for q in failed)
            yield from groups
            if done and not groups and not failed:
                return

    def push_weights(self, path: str, version: int, wait: bool = True) -> None:
        """Every worker swaps to `path` between engine steps; in-flight loops continue.

        The consumer's version (admission control, staleness) moves to `version` at once; each
        turn records the version that actually generated it. wait=False returns without waiting
        for the workers (the learner's next step overlaps the reload); a failed load surfaces
        at the next `take`."""
        if version <= self._policy[1]:
            raise UserError(f"weights '{path}': version {version} is not newer than {self._policy[1]}")
        path = check_remote_ref(path)  # a bad reference fails here, not inside every worker
        refs = [w.load_weights.remote(path, version) for w in self.workers]
        with self._cond:
            self._policy = (path, version)  # restarted workers catch up from here
            self.sched.version = version
            self._loads += [(ref, path) for ref in refs]
            self._cond.notify_all()
        if wait:
            for ref, _ in list(self._loads):
                self._settle_load(ref, block=True)

    def _settle_load(self, ref, block: bool) -> None:
        if not block and not ray.wait([ref], timeout=0)[0]:
            return
        with self._cond:
            entry = next((e for e in self._loads if e[0] == ref), None)
            if entry is None:
                return
            self._loads.remove(entry)
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError:
            pass  # it restarts and loads this policy before its next group
        except ray.exceptions.RayTaskError as e:
            raise UserError(f"weights '{entry[1]}': a worker could not load them: {failure_reason(e)}") from None

    @property
    def version(self) -> int:
        return self.sched.version

    def drain_settled(self) -> list[str]:
        """Group ids that left without delivery (filtered, stale, failed) since the last call."""
        with self._cond:
            out, self.sched.settled = self.sched.settled, []
            return out

    def stats(self) -> dict:
        with self._cond:
            c = self.sched.counters
            return {**vars(c), "in_flight": len(self.sched.in_flight), "buffered": self.sched.buffered,
                    "loads": list(self.sched.loads), "quarantined": len(self.quarantine),
                    "version": self.sched.version, "finished": self.sched.finished}

    def worker_info(self) -> list[dict]:
        return ray.get([w.info.remote() for w in self.workers])

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for ref in list(self._refs):
            ray.cancel(ref)
        self._refs.clear()
        if self._own:
            close_workers(self.workers)
        self.workers = []

    def _pump(self) -> None:
        try:
            while not self._stop.is_set():
                with self._cond:
                    self._dispatch()
                for ref, _ in list(self._loads):
                    self._settle_load(ref, block=False)
                if not self._refs:
                    with self._cond:
                        self._cond.wait(0.05)
                    continue
                ready, _ = ray.wait(list(self._refs), num_returns=1, timeout=0.1)
                if ready:
                    ready, _ = ray.wait(list(self._refs), num_returns=len(self._refs), timeout=0)
                for ref in ready:
                    self._collect(ref)
        except BaseException as e:  # surfaced to the consumer by take()
            with self._cond:
                self._error = e
                self._cond.notify_all()

    def _dispatch(self) -> None:
        weights, version = self._policy
        while (assignment := self.sched.next_assignment()) is not None:
            task, worker = assignment
            ref = self.workers[worker].run_group.remote(task, self.spec, weights, version)
            self._refs[ref] = (task.group_id, task.attempt, worker)

    def _collect(self, ref) -> None:
        group_id, attempt, _ = self._refs.pop(ref)
        try:
            group = ray.get(ref)
        except ray.exceptions.RayActorError:
            with self._cond:
                self._retry_or_quarantine(group_id, attempt)
            return
        except ray.exceptions.RayTaskError as e:
            with self._cond:
                self._give_up(group_id, attempt, failure_reason(e))
            return
        with self._cond:
            self.sched.on_result(group, attempt)
            self._cond.notify_all()

    def _retry_or_quarantine(self, group_id: str, attempt: int) -> None:
        if attempt >= self.cfg.rollout.max_restarts:
            self._give_up(group_id, attempt, f"its worker died {attempt + 1} times")
        else:
            self.sched.on_failure(group_id, attempt)
        self._cond.notify_all()

    def _give_up(self, group_id: str, attempt: int, reason: str) -> None:
        flight = self.sched.in_flight.get(group_id)
        if flight is not None and self.sched.on_error(group_id, attempt):
            self.quarantine.append((flight.task.row.sample_id, reason))
        self._cond.notify_all()


def run_groups(cfg: Config, rows: Iterable[Any], spec: RolloutSpec, group_size: int = 1,
               workers: list | None = None) -> Iterator[Group | Quarantined]:
    """Stream groups for task rows through the rollout machinery (evaluation, inspection).

    One policy, no learner: no staleness bound, no dynamic-sampling drop. Groups arrive in
    completion order and name their sample_id; a row that cannot run arrives as Quarantined
    (sample_id, reason) when it is given up on, so a caller can settle it without waiting
    for the rest. workers: started actors to reuse (else the call starts and stops its own).
    """
    r = cfg.rollout.model_copy(update={"group_size": group_size, "drop_equal_rewards": False, "max_staleness": None})
    service = RolloutService(cfg.model_copy(update={"rollout": r}), rows, workers=workers, spec=spec).start()
    try:
        yield from service.stream()
    finally:
        service.close()
