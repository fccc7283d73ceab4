"""Rollout metrics (the names issue 6 logs): pure, and streamable over any number of groups."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pipelines.rollout.trajectory import Group
from pipelines.track.metrics import GATE_EXIT_FRACTION, GATE_MALFORMED, GATE_UPDATE_RATE


@dataclass
class MetricsTally:
    """Running sums, so a long run reports its metrics without holding its trajectories."""

    trajectories: int = 0
    reward_sum: float = 0.0
    reward_sq: float = 0.0
    accuracy_sum: float = 0.0
    turns: int = 0
    memory_turns: int = 0
    memory_tokens: int = 0
    response_tokens: int = 0
    staleness_sum: float = 0.0
    chunks_read: int = 0
    chunks_unread: int = 0
    memory_updates: int = 0
    malformed: int = 0
    ungrounded: int = 0

    def add(self, groups: Iterable[Group], version: int | None = None) -> MetricsTally:
        """version: the consumer's policy version when these groups were taken."""
        for g in groups:
            for t in g.trajectories:
                self.trajectories += 1
                self.reward_sum += t.reward
                self.reward_sq += t.reward * t.reward
                self.accuracy_sum += t.accuracy
                self.turns += len(t.turns)
                self.response_tokens += t.response_tokens
                memory = [len(turn.response_ids) for turn in t.turns if not turn.is_final]
                self.memory_turns += len(memory)
                self.memory_tokens += sum(memory)
                self.staleness_sum += (version - t.version_min) if version is not None else 0
                self.ungrounded += t.ungrounded
                self.add_gates(t.chunks_read, t.chunks_unread, t.memory_updates, t.malformed)
        return self

    def add_gates(self, read: int, unread: int, updates: int, malformed: int) -> None:
        self.chunks_read += read
        self.chunks_unread += unread
        self.memory_updates += updates
        self.malformed += malformed

    def gate_metrics(self) -> dict[str, float]:
        return gate_rates(self.chunks_read, self.chunks_unread, self.memory_updates, self.malformed)

    def metrics(self, filtered_groups: int = 0, seconds: float | None = None) -> dict[str, float]:
        n = max(self.trajectories, 1)
        mean = self.reward_sum / n
        return {
            "rollout/reward_mean": mean,
            "rollout/reward_std": math.sqrt(max(self.reward_sq / n - mean * mean, 0.0)),
            "rollout/accuracy": self.accuracy_sum / n,
            "rollout/filtered_groups": float(filtered_groups),
            "rollout/turns": self.turns / n,
            "rollout/memory_tokens": self.memory_tokens / max(self.memory_turns, 1),
            "rollout/ungrounded_rate": self.ungrounded / max(self.memory_turns, 1),
            "rollout/response_tokens": self.response_tokens / n,
            "rollout/tokens_per_s": self.response_tokens / seconds if seconds else 0.0,
            "rollout/staleness": self.staleness_sum / n,
            **self.gate_metrics(),
        }


def gate_rates(read: int, unread: int, updates: int, malformed: int) -> dict[str, float]:
    """The gate/ metrics of any sum of memory turns (rollouts, a batch job's rows): the one
    definition. Ungated: update_rate 1, exit_fraction 0, malformed 0; nothing read: 0, 0, 0."""
    return {
        GATE_UPDATE_RATE: updates / max(read, 1),
        GATE_EXIT_FRACTION: unread / max(read + unread, 1),
        GATE_MALFORMED: float(malformed),
    }


def rollout_metrics(groups: list[Group], filtered_groups: int = 0, seconds: float | None = None,
                    version: int | None = None) -> dict[str, float]:
    """Means over the trajectories of `groups`.

    reward_std is over trajectories (population std); memory_tokens and ungrounded_rate (memory
    turns stating a number their prompt does not hold) are per memory turn;
    response_tokens per trajectory; tokens_per_s counts every response token over `seconds`;
    staleness is how far each trajectory's oldest turn lags `version` (0 when not given); the
    gate/ metrics are over all memory turns (pipelines.track.metrics).
    """
    return MetricsTally().add(groups, version).metrics(filtered_groups, seconds)
