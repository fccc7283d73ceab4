"""The rollout worker: an async Ray actor around WorkerCore. One engine per actor.

Ray runs the actor's async methods on one event loop, so `run_group` calls for many
groups and a `load_weights` push interleave: the push lands between engine steps and
in-flight loops continue on the new weights. If the process dies, Ray restarts it
(`max_restarts`); the service re-runs its unfinished groups.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import ray

from pipelines import runtime
from pipelines.config import Config
from pipelines.rollout.core import RolloutSpec
from pipelines.rollout.rss import process_rss
from pipelines.rollout.schedule import GroupTask
from pipelines.rollout.trajectory import Group


class RolloutWorker:
    def __init__(self, cfg: Config, model: str, name: str, version: int = 0, weights: str | None = None):
        """model: the base model's reference (absolute_ref), resolved on this worker's node."""
        self.cfg, self.model, self.name = cfg, model, name
        self.version, self.weights = version, weights
        self.model_dir: str | None = None  # the base model's folder on this node, once the engine starts
        self.core = None
        self._starting = asyncio.Lock()
        self._loading = asyncio.Lock()

    async def ready(self, weights: str | None = None, version: int | None = None) -> dict:
        """Start the engine (once; again after a restart) and catch up to the given policy."""
        await self._ensure(weights, version)
        return await self.info()

    async def _ensure(self, weights: str | None, version: int | None) -> None:
        async with self._starting:
            if self.core is None:
                self.model_dir = await self._local(self.model)
                self.core = await asyncio.to_thread(self._build)
                if self.weights:
                    await self.core.engine.load_weights(await self._local(self.weights), self.version)
        if weights is not None and version is not None and version > self.version:
            await self.load_weights(weights, version)

    def _build(self):
        from pipelines.engine import create_engine
        from pipelines.rollout.core import WorkerCore, open_store

        engine = create_engine(self.model_dir, self.cfg.engine, self.version)
        return WorkerCore(engine, self.cfg.agent, self.cfg.rollout.loops_per_worker, self.name, open_store(self.cfg))

    async def run_group(self, task: GroupTask, spec: RolloutSpec, weights: str | None = None,
                        version: int = 0) -> Group:
        """Run one group; a restarted worker first catches up to the policy the call names."""
        await self._ensure(weights, version)
        return await self.core.run_group(task, spec)

    async def load_weights(self, path: str, version: int) -> int:
        """Swap weights between engine steps; loops in flight keep going."""
        async with self._loading:
            if version > self.version:
                if self.core is not None:
                    await self.core.engine.load_weights(await self._local(path), version)
                self.weights, self.version = path, version
        return self.version

    async def reset(self, path: str | None, version: int = 0) -> int:
        """Start a new run's policy on this engine: `path` (None: the base model) at `version`,
        even below the current one (each training run numbers its versions from 0)."""
        async with self._loading:
            await self._ensure(None, None)
            folder = await self._local(path) if path else self.model_dir
            await self.core.engine.load_weights(folder, version)
            self.weights, self.version = path, version
        return self.version

    async def _local(self, ref: str) -> str:
        """A folder on this node for a model or pushed policy: s3:// and models:/ refs are fetched
        once into this node's home."""
        from pipelines.models import config_model_dir

        return str(await asyncio.to_thread(config_model_dir, self.cfg, ref))

    async def info(self) -> dict[str, Any]:
        import psutil

        children = [p.pid for p in psutil.Process().children(recursive=True)]
        done = self.core.rollouts_done if self.core else 0
        return {"name": self.name, "pid": os.getpid(), "children": children, "version": self.version,
                "rss": process_rss(os.getpid()), "rollouts": done, "model_dir": self.model_dir,
                "node_id": ray.get_runtime_context().get_node_id()}

    async def close(self) -> None:
        if self.core is not None:
            await self.core.engine.close()
            self.core = None


def start_workers(cfg: Config, model: str | None = None, version: int = 0, weights: str | None = None) -> list:
    """N worker actors (on the nodes offering rollout.worker_resources; with engine.use_gpu, each
    on engine.tensor_parallel_size GPUs of one node); each restarts on death and runs many groups
    at once. model: the base model's reference (default: model.path), checked here without
    fetching it; each worker resolves it on its own node."""
    from pipelines.models import check_remote_ref

    model = check_remote_ref(model or cfg.model.path, "model")
    cfg = runtime.portable(cfg)  # its home and stores resolved here, where the cwd is the user's
    actor = ray.remote(RolloutWorker).options(**worker_options(cfg))
    return [actor.remote(cfg, model, f"worker-{i}", version, weights) for i in range(cfg.rollout.workers)]


def worker_options(cfg: Config) -> dict[str, Any]:
    """A worker actor's Ray options: its CPUs, the GPUs its engine runs on (engine.num_gpus:
    tensor_parallel_size of them with engine.use_gpu), its custom resources."""
    r = cfg.rollout
    return {"num_cpus": r.worker_num_cpus, "num_gpus": cfg.engine.num_gpus, "resources": r.worker_resources,
            "max_restarts": r.max_restarts, "max_task_retries": 0,
            "max_concurrency": max(1000, 4 * r.loops_per_worker)}


def close_workers(workers: list) -> None:
    """Stop each engine cleanly, then the actor (no restart)."""
    for w in workers:
        try:
            ray.get(w.close.remote(), timeout=60)
        except Exception:  # a dead or hung worker: killing it is all that is left to do
            pass
        ray.kill(w, no_restart=True)
