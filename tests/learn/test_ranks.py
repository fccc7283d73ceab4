"""Data parallel on real torch.distributed (gloo, two processes): each rank steps on its share of
the batch with the whole batch's loss weights, gradients are summed (RL) or averaged (SFT),
and every rank steps with the gradient one process gets from the whole batch."""

from __future__ import annotations

import os
import random

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipelines.learn.config import LearnConfig
from pipelines.learn.packing import TrainSeq
from pipelines.learn.policy import Policy
from pipelines.learn.trainer import grad_sync
from tests.support import free_port
from tests.tiny import TINY_LEARN

pytestmark = pytest.mark.slow

CFG = LearnConfig(lr=1e-3, token_budget=64, grad_clip=1e9, seed=0, **TINY_LEARN)


def batch(vocab: int, sft: bool) -> list[TrainSeq]:
    """Rollouts of different sizes and advantages (SFT: two halves of equal token counts)."""
    rng = random.Random(0)
    seqs = []
    for i in range(6):
        p, r = (8, 4) if sft else (rng.randint(3, 12), rng.randint(2, 7))
        old = None if sft else [-rng.uniform(0.5, 3.0) for _ in range(r)]
        seqs.append(TrainSeq([rng.randrange(vocab) for _ in range(p)], [rng.randrange(vocab) for _ in range(r)],
                             old, 1.0 if sft else rng.choice((0.75, -0.5, 0.25)), i // 2))
    return seqs



def grads(policy: Policy) -> dict[str, torch.Tensor]:
    """The step's gradients (left in place by the step; no clipping at this grad_clip): Adam would
    hide a wrongly scaled sum from the weights, the gradients do not."""
    return {n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad}


def rank_main(rank: int, world: int, port: int, model_dir: str, sft: bool, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = Policy(model_dir, CFG, sync=grad_sync(world, summed=not sft))
    seqs = batch(policy.model.config.vocab_size, sft)
    if sft:  # SFT: each rank its own half of the data (a dataset shard)
        policy.step(seqs[rank::world], sft=True)
    else:  # RL: the whole batch's weights, this rank's conversations
        policy.step(seqs, list(range(rank, len(seqs), world)))
    torch.save(grads(policy), f"{out}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.mark.parametrize("sft", [False, True], ids=["rl-summed", "sft-averaged"])
def test_two_ranks_step_as_one_process_on_the_whole_batch(tmp_path, tiny_model_dir, sft):
    mp.start_processes(rank_main, args=(2, free_port(), str(tiny_model_dir), sft, str(tmp_path)), nprocs=2,
                       start_method="spawn")
    torch.manual_seed(0)
    alone = Policy(str(tiny_model_dir), CFG)
    alone.step(batch(alone.model.config.vocab_size, sft), sft=sft)
    want = grads(alone)
    assert all(torch.isfinite(g).all() for g in want.values()) and any(g.abs().sum() > 0 for g in want.values())
    for rank in range(2):
        got = torch.load(tmp_path / f"rank{rank}.pt")
        for name, g in want.items():
            assert torch.allclose(got[name], g, rtol=1e-4, atol=1e-7), (rank, name)
