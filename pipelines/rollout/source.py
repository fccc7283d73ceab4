"""What the learner sees of rollouts: a typed source of batches (`RolloutSource`).

The RL learner (pipelines/learn/trainer.py) asks for each optimizer step's `Batch`, hands back
the policies it publishes, and asks for the data cursor to checkpoint; everything it needs of
the rollout side goes through these calls, so the loop reads as the algorithm and the Ray
plumbing stays here. The one implementation, `HubSource`, wraps the rollout hub actor
(pipelines/rollout/hub.py), which computes each batch's rollout metrics where the groups are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from pipelines.rollout.trajectory import Group


@dataclass(frozen=True)
class Batch:
    """One optimizer step's complete groups and their rollout metrics (rollout/* and gate/* of
    pipelines.rollout.metrics, rollout/tokens_per_s over the time since the previous batch)."""

    groups: list[Group]
    metrics: dict[str, float]
    wait_s: float  # how long the learner asked before the batch was ready


class Evaluation(NamedTuple):
    """A held-out evaluation the source ran during training (pipelines.eval.heldout)."""

    step: int  # the step that asked for it
    version: int  # the policy version it scored
    scores: dict[str, float]  # strict score by task
    n: int  # rows scored


class RolloutSource(Protocol):
    def resume(self, cursor: dict, version: int, weights: str | None) -> bool:
        """The learner starts from a checkpoint; True if the source had to restart from it."""

    def next_batch(self, step: int, version: int, timeout: float) -> Batch | None:
        """Step `step`'s batch (the same however often asked; staleness against `version`), or
        None when none was ready within `timeout` seconds."""

    def counters(self) -> dict[str, float]:
        """Groups started, kept, filtered (dropped for equal rewards), stale, delivered, so far."""

    def publish(self, uri: str, version: int) -> None:
        """A new policy for the rollout workers; returns without waiting for them to load it."""

    def cursor(self, step: int) -> dict:
        """The data cursor as of the end of `step`: what a checkpoint of that step saves."""

    def ack(self, step: int) -> None:
        """The checkpoint of `step` is safe: its batches will never be asked for again."""

    def evaluate(self, step: int, tasks: str, n: int) -> None:
        """Score the current policy on `n` held-out rows of `tasks`, without holding up training."""

    def evaluations(self) -> list[Evaluation]:
        """Evaluations finished since the last call."""


class HubSource:
    """RolloutSource over the hub actor: the calls the learner acts on wait for their answer;
    publish, ack and evaluate return at once."""

    def __init__(self, hub: Any):
        self.hub = hub

    def resume(self, cursor: dict, version: int, weights: str | None) -> bool:
        return self._get(self.hub.resume.remote(cursor, version, weights))

    def next_batch(self, step: int, version: int, timeout: float) -> Batch | None:
        return self._get(self.hub.batch.remote(step, version, timeout))

    def counters(self) -> dict[str, float]:
        return self._get(self.hub.stats.remote())

    def publish(self, uri: str, version: int) -> None:
        self.hub.push.remote(uri, version)

    def cursor(self, step: int) -> dict:
        return self._get(self.hub.cursor_for.remote(step))

    def ack(self, step: int) -> None:
        self.hub.ack.remote(step)

    def evaluate(self, step: int, tasks: str, n: int) -> None:
        self.hub.evaluate.remote(step, tasks, n)

    def evaluations(self) -> list[Evaluation]:
        return self._get(self.hub.evaluations.remote())

    def close(self) -> None:
        """Stop the hub's service and the actor (the driver's, at the end of a run)."""
        import ray

        self._get(self.hub.close.remote())
        ray.kill(self.hub)

    @staticmethod
    def _get(ref: Any) -> Any:
        import ray

        return ray.get(ref)
