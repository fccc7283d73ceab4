"""One set of rollout workers kept for a whole job (the quickstart, continuous training): started on
first need, and each stage's policy loaded into the running engines (`RolloutWorker.reset`),
never by starting new ones."""

from __future__ import annotations

from pipelines.config import Config


def pool_config(cfg: Config) -> Config:
    """What the pool's workers start under. Their size is the rollout section's alone
    (loops_per_worker, which RL's scheduler sizes for; an evaluation on the pool keeps
    eval.concurrency loops per worker in flight through its own service); documents of doc_id
    rows come from eval.store when it is given, as an evaluation's own workers read them."""
    if not cfg.eval.store:
        return cfg
    return cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"store": cfg.eval.store})})


class Pool:
    def __init__(self, cfg: Config):
        """cfg: the job's config; the workers start under pool_config(cfg)."""
        self.cfg, self.workers = pool_config(cfg), []

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
