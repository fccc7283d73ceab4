"""One set of rollout workers kept for a whole job (the quickstart, continuous training): started on
first need, and each stage's policy loaded into the running engines (`RolloutWorker.reset`),
never by starting new ones."""

from __future__ import annotations

from pipelines.config import Config


class Pool:
    def __init__(self, cfg: Config):
        """cfg: the job's config, which the workers start under. Their size is the rollout section's
        alone (loops_per_worker, which RL's scheduler sizes for; an evaluation on the pool keeps
        eval.concurrency loops per worker in flight through its own service)."""
        self.cfg, self.workers = cfg, []

    def load(self, model: str | None) -> list:
        """The workers (started if need be), every engine on `model` (None: the base model) as a
        run's version 0."""
        import ray

        if not self.workers:
            from pipelines import runtime
            from pipelines.rollout.worker import start_workers

            runtime.connect()
            self.workers = start_workers(self.cfg)
        ray.get([w.reset.remote(model, 0) for w in self.workers])
        return self.workers

    def close(self) -> None:
        if self.workers:
            from pipelines.rollout.worker import close_workers

            close_workers(self.workers)
            self.workers = []
