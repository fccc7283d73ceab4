"""Do the rollout workers and the learner fit the `cluster:` section, and can every node
reach the data? Ray waits forever for resources that no node has, so a misfit found here
is a run that would otherwise hang at its first placement.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from pipelines.config import Config
from pipelines.models.refs import kind_of
from pipelines.storage import is_s3

EPS = 1e-9


def count(n: float, what: str) -> str:
    return f"{n:g} {what}" + ("" if n == 1 else "s")


@dataclass(frozen=True)
class Pool:
    """Identical nodes: a worker group, or the whole cluster when no group is named."""
    name: str | None  # the group; None: the whole cluster
    nodes: int
    cpus: float  # per node
    gpus: int  # per node

    @property
    def label(self) -> str:
        where = f"group '{self.name}'" if self.name else "the cluster"
        return f"{where} ({count(self.nodes, 'node')} x {count(self.cpus, 'CPU')}, {count(self.gpus, 'GPU')})"


@dataclass(frozen=True)
class Placement:
    role: str  # rollout | learner
    workers: int
    cpus: float  # per worker
    gpus: int  # per worker
    keys: str  # the settings the demand comes from
    pool: Pool

    @property
    def fit(self) -> int:
        """Workers the pool holds: each worker lies within one node."""
        per_node = int(self.pool.cpus / self.cpus + EPS)
        if self.gpus:
            per_node = min(per_node, self.pool.gpus // self.gpus)
        return per_node * self.pool.nodes

    def line(self) -> str:
        need = f"{count(self.workers, 'worker')} x ({count(self.cpus, 'CPU')}, {count(self.gpus, 'GPU')})"
        return f"{self.role}: {need} in {self.pool.label}"

    def summary(self) -> dict:
        return {**asdict(self), "pool": asdict(self.pool), "fit": self.fit}


def pool_of(cfg: Config, group: str | None) -> Pool:
    c = cfg.cluster
    cpus = c.cpus_per_node or float(os.cpu_count() or 1)
    if group is None:
        return Pool(None, c.nodes, cpus, c.gpus_per_node)
    g = c.groups[group]
    gpus = c.gpus_per_node if g.gpus_per_node is None else g.gpus_per_node
    return Pool(group, g.nodes, g.cpus_per_node or cpus, gpus)


def placements(cfg: Config) -> list[Placement]:
    """What `memagent train` places: the rollout workers (an engine each, on
    engine.tensor_parallel_size GPUs with engine.use_gpu: engine.num_gpus, as the workers ask
    Ray) and the Ray Train workers (a GPU each with learn.use_gpu)."""
    r, lc, c = cfg.rollout, cfg.learn, cfg.cluster
    rollout_pool, learner_pool = pool_of(cfg, c.rollout_group), pool_of(cfg, c.learner_group)
    return [
        Placement("rollout", r.workers, r.worker_num_cpus, cfg.engine.num_gpus,
                  "rollout.workers, rollout.worker_num_cpus, engine.use_gpu, engine.tensor_parallel_size",
                  rollout_pool),
        Placement("learner", lc.num_workers, lc.cpus_per_worker, 1 if lc.use_gpu else 0,
                  "learn.num_workers, learn.cpus_per_worker, learn.use_gpu", learner_pool),
    ]


def resource_problems(cfg: Config, places: list[Placement]) -> list[str]:
    c = cfg.cluster
    out = []
    in_groups = sum(g.nodes for g in c.groups.values())
    if in_groups > c.nodes:
        out.append(f"cluster.groups: {in_groups} nodes in all, more than cluster.nodes={c.nodes}")
    rollout, learner = places
    for p in places:
        if p.fit < p.workers:
            out.append((p is rollout and engine_problem(cfg, p)) or f"{p.line()}: only {p.fit} fit ({p.keys})")
    if rollout.pool == learner.pool and all(p.fit >= p.workers for p in places):
        cpus = sum(p.workers * p.cpus for p in places)
        gpus = sum(p.workers * p.gpus for p in places)
        have_cpus, have_gpus = rollout.pool.nodes * rollout.pool.cpus, rollout.pool.nodes * rollout.pool.gpus
        if cpus > have_cpus + EPS or gpus > have_gpus:
            out.append(f"rollout + learner share {rollout.pool.label}: together they need {count(cpus, 'CPU')}, "
                       f"{count(gpus, 'GPU')} of its {count(have_cpus, 'CPU')}, {count(have_gpus, 'GPU')}")
    return out


def engine_problem(cfg: Config, rollout: Placement) -> str | None:
    """A GPU engine that no node of its pool can hold: its worker actor reserves all of its
    tensor-parallel GPUs on one node (vLLM starts the engine's ranks from that process)."""
    e, pool = cfg.engine, rollout.pool
    if not e.use_gpu:
        return None
    if pool.gpus == 0:
        return f"engine.use_gpu=true: {pool.label} has no GPUs"
    if e.tensor_parallel_size > pool.gpus:
        return (f"engine.tensor_parallel_size={e.tensor_parallel_size}: more GPUs than one node of {pool.label} "
                f"has; an engine's GPUs lie within one node")
    return None


def shared_paths(cfg: Config) -> dict[str, str]:
    """Where a worker on any node reads or writes: each must be shared storage on a cluster."""
    paths = {"data.store": cfg.data.store, "serve.state_dir": cfg.serve.state_dir or "HOME/serve"}
    for key, value in (("serve.store", cfg.serve.store), ("track.tracking_uri", cfg.track.tracking_uri)):
        if value:
            paths[key] = value
    if kind_of(cfg.model.path) == "folder":
        paths["model.path"] = cfg.model.path
    return paths


def storage_problems(cfg: Config) -> list[str]:
    """On more than one node, a local folder is a different folder on every node."""
    c = cfg.cluster
    if c.nodes < 2:
        return []
    remote = ("s3://", "http://", "https://", "databricks")
    return [f"{key} '{value}': a local path, but cluster.nodes={c.nodes}: other nodes cannot see it "
            f"(use s3://)" for key, value in shared_paths(cfg).items()
            if not (is_s3(value) or value.startswith(remote))]
