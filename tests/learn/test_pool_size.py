"""The rollout pool's size comes from the rollout config alone: on the cluster preset (256 loops
per engine, eval.concurrency 32) nightly training once ran 32 loops per engine while the
scheduler planned for 256. No Ray: the pool starts nothing until it is first loaded."""

from __future__ import annotations

from pipelines.config import REPO_ROOT, load_config
from pipelines.learn.continuous import rollout_pool
from pipelines.rollout.service import limits_of
from pipelines.rollout.worker import worker_options


def test_continuous_training_pool_runs_the_loops_the_scheduler_plans_for():
    cfg = load_config(REPO_ROOT / "pipelines" / "configs" / "cluster-qwen2.5-7b.yaml")
    assert (cfg.rollout.loops_per_worker, cfg.eval.concurrency) == (256, 32)  # the preset this is about
    pool = rollout_pool(cfg)
    assert pool.workers == []  # nothing started
    assert pool.cfg.rollout.loops_per_worker == 256  # each engine's semaphore of agent loops
    assert worker_options(pool.cfg)["max_concurrency"] == 1024  # Ray lets all their calls in at once
    planned = limits_of(cfg, cfg.rollout.workers)  # what the RL service dispatches per worker, in groups
    assert planned.groups_per_worker * cfg.rollout.group_size == pool.cfg.rollout.loops_per_worker
