"""What the driver hands each learner worker (RunSpec), and how a worker's bad input reaches the
driver through Ray's wrappers (user_error). Light on purpose: the driver and Ray Train's
controller import it, and neither needs torch (pipelines/learn/launch.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import ray

from pipelines.errors import UserError

if TYPE_CHECKING:
    from pipelines.rollout.source import RolloutSource


@dataclass(frozen=True)
class RunSpec:
    out: str  # the run's folder (local absolute or s3://)
    model: str  # the base model's reference (absolute_ref): each learner worker resolves it on its node
    steps: int  # stop after this optimizer step (counted from the run's start)
    deadline: float | None  # wall-clock bound (time.time())
    sft: bool
    tasks: str = ""  # task rows (SFT: the held-back slice is read from them)
    eval_tasks: str = ""  # held-out rows scored every learn.eval_every steps (RL)
    board: Any = None  # the driver's progress board (an actor)
    source: RolloutSource | None = None  # RL: where the batches come from
    model_dir: str = ""  # the base model's folder on this worker's node (set by train_loop)
    start_from: str | None = None  # a checkpoint to resume from that Ray Train's index lost (runs.repair_index)


def user_error(e: BaseException | None) -> UserError | None:
    """The UserError under Ray's wrappers (task errors, Ray Train's worker failures), if any."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, UserError) and not isinstance(e, ray.exceptions.RayError):
            return e
        failures = getattr(e, "worker_failures", None)
        if failures:
            found = [u for u in map(user_error, failures.values()) if u is not None]
            return found[0] if found else None
        e = getattr(e, "cause", None) or getattr(e, "_base_exc", None) or e.__cause__ or e.__context__
    return None
