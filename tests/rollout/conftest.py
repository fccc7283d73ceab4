"""One Ray session and two vLLM rollout workers (real SmolLM2) shared by the module's tests."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipelines.config import load_config

# Small budgets: ~1-4 chunks of 256 tokens, 16-token memories; fractional CPUs on a 2-core box.
BASE = ["engine.cpu_kvcache_gib=1", "engine.max_model_len=2048", "engine.max_num_seqs=32",
        "agent.chunk_size=256", "agent.memory_budget=16", "agent.final_budget=16",
        "rollout.workers=2", "rollout.worker_num_cpus=0.5", "rollout.loops_per_worker=16"]


def rollout_cfg(*overrides: str):
    return load_config(None, [*BASE, *overrides])


@pytest.fixture(scope="module")
def workers(s3, ray_session, smollm2_dir):
    """Ray starts after the S3 server, so workers inherit its endpoint and keys (pushes from s3://)."""
    import ray

    from pipelines.rollout.worker import close_workers, start_workers

    actors = start_workers(rollout_cfg(), str(smollm2_dir))
    ray.get([w.ready.remote() for w in actors])
    yield actors
    close_workers(actors)


@pytest.fixture(scope="module")
def perturbed_dir(tmp_path_factory, smollm2_dir) -> Path:
    """Stands in for the learner's output: SmolLM2 with noise added to every MLP matrix."""
    import torch
    from safetensors.torch import load_file, save_file

    out = tmp_path_factory.mktemp("perturbed")
    for f in smollm2_dir.iterdir():
        if f.suffix != ".safetensors":
            shutil.copy(f, out / f.name)
    state = load_file(smollm2_dir / "model.safetensors")
    gen = torch.Generator().manual_seed(0)
    for name, t in state.items():
        if ".mlp." in name and t.dim() == 2:
            noise = torch.randn(t.shape, generator=gen) * t.float().std() * 0.5
            state[name] = (t.float() + noise).to(t.dtype)
    save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    return out
