"""The `cluster:` config section: the machines a config is meant to run on.

Nothing starts from it: `memagent config check` compares what the rollout workers and the
learner ask for with it, and the KubeRay manifests in infra/k8s/ have one worker group per
group named here. The default is this machine alone: one node, its cores, no GPU, and the
rollout workers sharing it with the learner.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from pipelines.typed import Strict


class GroupConfig(Strict):
    # A KubeRay worker group: `nodes` identical pods. None: the cluster's per-node figure.
    nodes: int = Field(1, gt=0)
    gpus_per_node: int | None = Field(None, ge=0)
    cpus_per_node: float | None = Field(None, gt=0)


class ClusterConfig(Strict):
    # Nodes that run work (on KubeRay the head runs the drivers only: num-cpus 0).
    nodes: int = Field(1, gt=0)
    gpus_per_node: int = Field(0, ge=0)
    cpus_per_node: float | None = Field(None, gt=0)  # None: this machine's cores
    groups: dict[str, GroupConfig] = {}
    # The group the rollout workers (one engine each) and the Ray Train workers run in;
    # None: anywhere in the cluster, the two sharing it.
    rollout_group: str | None = None
    learner_group: str | None = None

    @model_validator(mode="after")
    def _groups_named(self) -> ClusterConfig:
        for key in ("rollout_group", "learner_group"):
            name = getattr(self, key)
            if name is not None and name not in self.groups:
                known = ", ".join(sorted(self.groups)) or "none defined"
                raise ValueError(f"{key} '{name}' is not in cluster.groups ({known})")
        return self
