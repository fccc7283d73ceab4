"""Helpers the tests share (fixtures stay in conftest.py files): the repository root, a free
port, the `memagent` command as a user runs it, a tiny random model, a local Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.runtime import free_port

REPO = Path(__file__).resolve().parents[2]

__all__ = ["REPO", "free_port", "local_ray", "make_tiny_llama", "run_cli"]


def run_cli(*args: str, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run `memagent ARGS` as a user would, in a fresh process."""
    return subprocess.run([sys.executable, "-m", "pipelines.cli", *args], capture_output=True,
                          text=True, cwd=REPO, env={**os.environ, **(env or {})}, timeout=timeout)


def make_tiny_llama(out: Path, tokenizer, **dims) -> Path:
    """A random Llama with SmolLM2's tokenizer, saved as an HF folder: for tests where only shapes matter."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True, **dims)
    LlamaForCausalLM(cfg).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


@contextmanager
def local_ray() -> Iterator[None]:
    """A local Ray of 2 CPUs (this machine's) whose workers import from the repository (the
    tests' rewards), their output kept out of the test's; shut down after."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    try:
        yield
    finally:
        ray.shutdown()
