"""Helpers the tests share (fixtures stay in conftest.py files): the repository root, a free
port, the `memagent` command as a user runs it and its one-line errors, a command's own lines and
its log file, task rows from the real builders, a tiny random model, a local Ray."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipelines.runtime import free_port

REPO = Path(__file__).resolve().parents[2]

__all__ = ["OURS", "REPO", "built", "check_error", "cli_env", "free_port", "local_ray", "make_tiny_llama", "only_log",
           "run_cli"]

# the first words of a line a command writes itself (everything else goes to the log file)
OURS = re.compile(r"^(memagent: |ask: |rollout: |ingest: |data build )")


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


def scripted_llama(out: Path, tokenizer, chain: list[int], hidden: int = 64, heads: int = 4) -> Path:
    """A real HF Llama that, greedy, answers any chat prompt with a fixed token chain: its layers add
    nothing to the residual stream, so each next token is a function of the last one only (chain[i]
    -> chain[i + 1], starting from the generation prompt's last token)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=len(tokenizer), bos_token_id=tokenizer.bos_token_id,
                      eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False, hidden_size=hidden,
                      intermediate_size=2 * hidden, num_hidden_layers=1, num_attention_heads=heads,
                      num_key_value_heads=heads // 2, max_position_embeddings=8192)
    model = LlamaForCausalLM(cfg)
    basis = {t: i for i, t in enumerate(dict.fromkeys(chain))}
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        for t, i in basis.items():
            model.model.embed_tokens.weight[t].zero_()
            model.model.embed_tokens.weight[t, i] = 1.0
        for a, b in zip(chain, chain[1:]):
            model.lm_head.weight[b].zero_()
            model.lm_head.weight[b, basis[a]] = 100.0
    model.save_pretrained(out)
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


def check_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """A command that refused its input: exit 2, no traceback, one last line naming `needles`."""
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.strip()
    assert "Traceback" not in err
    last = err.splitlines()[-1]
    assert last.startswith("memagent: error:")
    for needle in needles:
        assert needle in last, last


def cli_env(cmd_home: Path, **extra: str) -> dict:
    """A command's environment with its home (and so its log file) under `cmd_home`."""
    return {"MEMAGENT_HOME": str(cmd_home), "MEMAGENT_LOG": "", **extra}


def only_log(cmd_home: Path) -> str:
    [log] = (cmd_home / "logs").glob("memagent-*.log")
    return log.read_text()


def built(task: str, tokenizer, target: int = 2048, n: int = 2, seed: int = 0) -> list:
    """`n` task rows of `task` near `target` tokens, from the real builders."""
    from pipelines.ingest.builders.build import BuildRequest, inline_rows

    backend = tokenizer.backend_tokenizer
    count = lambda text: len(backend.encode(text, add_special_tokens=False).ids)  # noqa: E731
    return list(inline_rows(BuildRequest(task, str(target), n, "", "", seed, "train"), target, count))
