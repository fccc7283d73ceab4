"""The rollout service as a Ray actor, so the learner's rank 0 reaches it over Ray.

    hub, started = start_hub(cfg, tasks_uri, version, weights, cursor, score=task_scores)
    ray.get(started)                                # its workers hold the policy (or their start failure)
    groups = ray.get(hub.take.remote(n, step, 5.0)) # the batch of optimizer step `step` (None: not yet)
    batch = ray.get(hub.batch.remote(step, v, 5.0)) # the same with its rollout metrics (rollout.source.Batch)
    hub.push.remote(uri, version)                   # returns at once; workers swap between steps
    state = ray.get(hub.cursor_for.remote(step))    # the data cursor to checkpoint with step
    hub.ack.remote(step)                            # that checkpoint is safe
    hub.resume.remote(cursor, version, weights)     # a learner (re)starting from its checkpoint

Exactly-once data: a batch handed out for step s stays pending until the learner confirms its
checkpoint (ack). A learner restarted from step s-1's checkpoint asks for step s again and
gets the same groups; a run resumed from disk skips every row the checkpoint's cursor used.
A hub that died is restarted by Ray (its workers die with it) and waits, serving nothing, until
the learner, which fails on its next call and is restarted from its checkpoint by Ray Train,
hands it that checkpoint's cursor and policy (`resume`): the same rule as a run resumed from disk.
The learner reaches it through pipelines.rollout.source.HubSource, typed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from pipelines.rollout.cursor import Cursor
from pipelines.rollout.metrics import MetricsTally
from pipelines.rollout.source import Batch, Evaluation
from pipelines.rollout.trajectory import Group

# score(cfg, rows, workers) -> ({task: strict mean}, rows scored): pipelines.eval.heldout.task_scores
Scorer = Callable[[Any, list, list], tuple[dict[str, float], int]]


class RolloutHub:
    def __init__(self, cfg: Any, tasks: str, version: int = 0, weights: str | None = None,
                 cursor: dict | None = None, service: Callable[[Iterator[Any]], Any] | None = None,
                 workers: list | None = None, score: Scorer | None = None):
        """tasks: task rows (parquet, local or s3://), read pass after pass. service(rows): the
        started service that runs them (default: a RolloutService; tests pass one without Ray).
        workers: rollout actors to use and leave running (default: the service starts its own).
        score: how `evaluate` scores held-out rows."""
        from pipelines.rollout.service import RolloutService

        self.cursor = Cursor.from_dict(cursor)
        self._tasks = tasks
        self._index: dict[int, int] = {}  # scheduler sequence number -> stream index
        self._pending: dict[int, list[Group]] = {}  # step -> its batch, until acked
        self._lock = threading.Lock()
        self._taking = threading.Lock()  # one take at a time: a step asked twice gets one batch
        self._evals: list[Evaluation] = []
        self._score = score
        self._groups = cfg.rollout.batch_groups if cfg is not None else 0  # a step's groups
        self._clock = time.perf_counter()  # when the last batch was handed out (or the learner started)
        self._asked: dict[int, float] = {}  # step -> when its batch was first asked for
        self._make = ((lambda rows, v, w: service(rows)) if service else
                      (lambda rows, v, w: RolloutService(cfg, rows, v, w, workers).start()))
        self.service = None if restarted() else self._make(self._rows(), version, weights)

    def resume(self, cursor: dict | None, version: int, weights: str | None) -> bool:
        """The learner starts from a checkpoint with this cursor and policy. A hub that never died
        keeps what it has (the batches of steps after the checkpoint are pending: asked again,
        they come again); one that Ray restarted starts its service from them. True if it did."""
        with self._taking, self._lock:
            self._clock = time.perf_counter()  # the learner's start: the first batch's period begins
            if self.service is not None:
                return False
            self.cursor, self._index, self._pending = Cursor.from_dict(cursor), {}, {}
            self.service = self._make(self._rows(), version, weights)
            return True

    @property
    def live(self):
        """The running service; a restarted hub has none until `resume`, and a call that needs one
        fails, so that its learner restarts from its checkpoint and resumes the hub."""
        if self.service is None:
            raise RuntimeError("the rollout hub was restarted: the learner resumes it from its checkpoint")
        return self.service

    def _rows(self) -> Iterator[Any]:
        """The source's rows, pass after pass, less those the cursor has used up."""
        from pipelines.data.tasks import read_task_rows

        seq, stream = 0, itertools.chain.from_iterable(read_task_rows(self._tasks) for _ in itertools.count())
        for index, row in enumerate(stream):
            if self.cursor.skip(index):
                continue
            seq += 1
            self._index[seq] = index
            yield row

    def take(self, n: int, step: int, timeout: float | None = None) -> list[Group] | None:
        """The batch of step `step`: the same groups however often it is asked (a learner
        restarted while its first call still waits asks again; serialised, both get one batch).
        None when no batch was ready within `timeout` seconds (the learner asks again)."""
        with self._taking:
            with self._lock:
                if step in self._pending:
                    return self._pending[step]
            try:
                groups = self.live.take(n, timeout)
            except TimeoutError:
                return None
            with self._lock:
                self._pending[step] = groups
            return groups

    def batch(self, step: int, version: int, timeout: float | None = None) -> Batch | None:
        """`take` of rollout.batch_groups groups, with their rollout metrics: staleness against the
        learner's `version`, tokens per second over the time since the previous batch was handed
        out (what reaches the learner; groups dropped by dynamic sampling are not counted)."""
        with self._lock:
            asked = self._asked.setdefault(step, time.perf_counter())
        groups = self.take(self._groups, step, timeout)
        if groups is None:
            return None
        with self._lock:
            now, self._asked = time.perf_counter(), {s: t for s, t in self._asked.items() if s > step}
            every_s, self._clock = now - self._clock, now
        return Batch(groups, MetricsTally().add(groups, version).metrics(seconds=every_s), now - asked)

    def push(self, uri: str, version: int) -> bool:
        """Hand a published policy to the workers without waiting; False if not newer (a restarted
        learner re-publishing a version the workers already have)."""
        if self.service is None or version <= self.service.version:
            return False
        self.service.push_weights(uri, version, wait=False)
        return True

    def cursor_for(self, step: int) -> dict:
        """The cursor as of the end of `step`: every settled row, and the batches up to `step`."""
        with self._lock:
            self._settle()
            c = Cursor(self.cursor.start, set(self.cursor.done))
            for s, groups in self._pending.items():
                if s <= step:
                    for g in groups:
                        c.mark(self._stream_index(g.group_id))
            return c.to_dict()

    def ack(self, step: int) -> None:
        with self._lock:
            for s in [s for s in self._pending if s <= step]:
                for g in self._pending.pop(s):
                    self.cursor.mark(self._stream_index(g.group_id, pop=True))

    def _settle(self) -> None:
        for group_id in self.live.drain_settled():
            self.cursor.mark(self._stream_index(group_id, pop=True))

    def _stream_index(self, group_id: str, pop: bool = False) -> int:
        seq = int(group_id.rsplit("#", 1)[1])
        return self._index.pop(seq) if pop else self._index[seq]

    def evaluate(self, step: int, tasks: str, n: int) -> None:
        """Score the current policy on `n` held-out rows, greedy, on the same workers, without
        holding up training; the result is collected with `evaluations`."""
        threading.Thread(target=self._evaluate, args=(self.live, step, tasks, n), name=f"eval-{step}",
                         daemon=True).start()

    def _evaluate(self, service, step: int, tasks: str, n: int) -> None:
        from pipelines.data.tasks import read_task_rows

        version = service.version
        try:
            rows = list(itertools.islice(read_task_rows(tasks), n))  # n is small: a fixed held-out set
            scores, scored = self._score(service.cfg, rows, service.workers)
        except Exception as e:  # noqa: BLE001 - an evaluation failure must not stop training
            scores, scored = {"error": 0.0}, 1
            print(f"evaluation at step {step} failed: {e}", flush=True)
        with self._lock:
            self._evals.append(Evaluation(step, version, scores, scored))

    def evaluations(self) -> list[Evaluation]:
        """Finished evaluations since the last call."""
        with self._lock:
            out, self._evals = self._evals, []
            return out

    def stats(self) -> dict:
        return self.live.stats()

    def version(self) -> int:
        return self.live.version

    def worker_info(self) -> list[dict]:
        return self.live.worker_info()

    def close(self) -> None:
        if self.service is not None:
            self.service.close()


def restarted() -> bool:
    """Whether this process is a hub actor that Ray restarted after it died (False outside Ray:
    asking for the runtime context there would start a local Ray)."""
    if not ray.is_initialized():
        return False
    ctx = ray.get_runtime_context()
    return ctx.worker.mode == ray.WORKER_MODE and ctx.was_current_actor_reconstructed


def start_hub(cfg: Any, tasks: str, version: int = 0, weights: str | None = None, cursor: dict | None = None,
              workers: list | None = None, score: Scorer | None = None):
    """(the hub actor, a reference that resolves once its workers hold the policy and raises their
    start failure, as one error): the caller starts the learner while the workers load. The hub
    has no CPU of its own (its workers hold the engines' CPUs); Ray restarts it as often as Ray
    Train restarts the learner (learn.max_failures)."""
    actor = ray.remote(RolloutHub).options(num_cpus=0, max_concurrency=8, max_restarts=cfg.learn.max_failures)
    hub = actor.remote(cfg, tasks, version, weights, cursor, workers=workers, score=score)
    return hub, hub.version.remote()
