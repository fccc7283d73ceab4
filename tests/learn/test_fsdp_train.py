"""`memagent train` with learn.strategy=fsdp2 over two Ray Train workers (gloo on CPU, a tiny
random Llama): RL steps checkpoint and publish whole models; an SFT run keeps its best model. The sharded step itself is checked against one
process in test_fsdp.py; this is the glue (collective saves and pushes) on real Ray Train."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import load_file

from pipelines.data.tasks import write_task_rows
from tests.support import run_cli
from tests.learn.conftest import rl_overrides
from tests.learn.rows import synthetic_rows, token_counter

pytestmark = pytest.mark.slow

FSDP = ["learn.num_workers=2", "learn.strategy=fsdp2", "learn.cpus_per_worker=0.5", "learn.threads=1"]


def test_two_sharded_workers_train_checkpoint_and_publish(tmp_path, tiny_model_dir, tokenizer):
    """Resuming a sharded checkpoint is checked in test_fsdp.py (the round trip); here every
    step checkpoints and publishes, both collective."""
    tasks = str(tmp_path / "tasks")
    write_task_rows(synthetic_rows(24, token_counter(tokenizer)), tasks)
    proc = run_cli("train", "--tasks", tasks, "--out", str(tmp_path / "run"), "--steps", "2",
                   *rl_overrides(tiny_model_dir), *FSDP, "rollout.drop_equal_rewards=false", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 2/2" in proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["steps"] == 2 and result["version"] == 2
    final = load_file(f"{result['model']}/model.safetensors")
    base = load_file(f"{tiny_model_dir}/model.safetensors")
    assert set(final) == set(base) and all(final[k].shape == base[k].shape for k in base)  # whole, not a shard
    assert any(not (final[k] == base[k]).all() for k in base)


def test_sharded_sft_keeps_its_best_model(tmp_path, tiny_model_dir, tokenizer):
    tasks = str(tmp_path / "tasks")
    write_task_rows(synthetic_rows(48, token_counter(tokenizer)), tasks)
    proc = run_cli("train", "--sft", "--tasks", tasks, "--out", str(tmp_path / "sft"), "--steps", "2",
                   *rl_overrides(tiny_model_dir, sft=True), *FSDP[:-1], "learn.sft.threads=1", "agent.final_budget=16", "learn.sft_batch=8",
                   "learn.sft.checkpoint_every=2", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "heldout" in proc.stderr  # the held-back loss was scored (collectively) at the checkpoint
    best = load_file(f"{tmp_path / 'sft' / 'best'}/model.safetensors")
    base = load_file(f"{tiny_model_dir}/model.safetensors")
    assert set(best) == set(base) and any(not (best[k] == base[k]).all() for k in base)
