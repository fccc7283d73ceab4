"""Typed config of the `rollout:` section (groups, workers, buffer, staleness, reward)."""

from __future__ import annotations

from pydantic import Field

from pipelines.typed import Strict


class RolloutConfig(Strict):
    # Rollouts per question (paper: 16) and their sampling temperature.
    group_size: int = Field(8, gt=0)  # SmolLM2 here: the paper's 16 halves the groups per minute; 8 still mixes
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    # Ray actors, each owning one engine; CPUs each reserves (fractions are fine).
    workers: int = Field(1, gt=0)
    worker_num_cpus: float = Field(1.0, gt=0.0)
    # Ray custom resources each worker also reserves, e.g. {"rollout_node": 1}: places the workers
    # on the nodes that offer them (`ray start --resources`; a KubeRay group's rayStartParams).
    worker_resources: dict[str, float] = {}
    # Agent loops a worker drives at once (CPU vLLM saturates near 32 sequences in flight).
    loops_per_worker: int = Field(32, gt=0)
    # Buffer bound in groups: finished and in-flight groups together never exceed it.
    buffer_groups: int = Field(32, gt=0)
    # Groups per learner batch; admission control counts batches with it.
    batch_groups: int = Field(2, gt=0)  # 16 rollouts a step here: 4 groups of 8 took 7-9 min a step
    # Policy versions a trajectory may lag the consumer by; None: no bound (eval, inspection).
    max_staleness: int | None = Field(1, ge=0)
    # DAPO dynamic sampling: drop (and count) groups whose rewards are all equal.
    drop_equal_rewards: bool = True
    # Dotted path "module:function" or "module.function", called as f(response, answers) -> float.
    # None: strict_reward for one-of rows, recall_all of the boxed answer for all-of rows.
    reward: str | None = None
    # How often Ray restarts a killed worker; its unfinished groups are re-run meanwhile.
    max_restarts: int = Field(4, ge=0)
    # Trajectories per parquet part written by `memagent rollout`.
    part_groups: int = Field(64, gt=0)
