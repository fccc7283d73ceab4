"""The KV block size asked of vLLM: small on the CPU build, so memory turns hit the prefix cache."""

import pytest
from pydantic import ValidationError

from pipelines.engine.config import EngineConfig
from pipelines.engine.vllm_engine import CPU_BLOCK_SIZE, block_size


def test_cpu_build_defaults_to_small_blocks_gpu_to_vllms_own():
    assert block_size(EngineConfig(), cpu=True) == CPU_BLOCK_SIZE == 32
    assert block_size(EngineConfig(), cpu=False) is None


def test_a_set_block_size_wins_on_either_build():
    assert block_size(EngineConfig(block_size=128), cpu=True) == 128
    assert block_size(EngineConfig(block_size=64), cpu=False) == 64


def test_block_size_must_be_positive():
    with pytest.raises(ValidationError, match="block_size"):
        EngineConfig(block_size=0)
