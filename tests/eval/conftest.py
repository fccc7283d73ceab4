"""The ladder's fixtures: a needle dataset, and one Ray session with a vLLM rollout worker
shared by the module's end-to-end tests (the ladder reuses it instead of starting its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.eval.needles import write_needle_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def needle_dataset(tmp_path_factory, tokenizer) -> str:
    return write_needle_dataset(tmp_path_factory.mktemp("tasks"), tokenizer)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield
    ray.shutdown()
