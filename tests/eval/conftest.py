"""The ladder's fixtures: a needle dataset, and one Ray session with a vLLM rollout worker
shared by the module's end-to-end tests (the ladder reuses it instead of starting its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import make_tiny_llama
from tests.eval.needles import write_needle_dataset

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def needle_dataset(tmp_path_factory, tokenizer) -> str:
    return write_needle_dataset(tmp_path_factory.mktemp("tasks"), tokenizer)


@pytest.fixture(scope="session")
def vllm_tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A random 2-layer Llama that vLLM's CPU attention accepts (head_dim 64): structure only, in seconds."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama-vllm"), tokenizer, hidden_size=128,
                           intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, max_position_embeddings=4096)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield
    ray.shutdown()
