"""FSDP2 (learn.strategy=fsdp2) on real torch.distributed (gloo, two CPU processes, a tiny random
model): the sharded step's gradient is the one a single process gets from the whole batch, also
when the ranks have different numbers of micro-batches; the gathered weights are the model's;
a checkpoint of the sharded state restores it. (On GPUs the same code runs over NCCL.)"""

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
from tests.support import free_port
from tests.tiny import TINY_LEARN

pytestmark = pytest.mark.slow

CFG = LearnConfig(lr=1e-3, token_budget=64, grad_clip=1e9, seed=0, **TINY_LEARN)


def uneven_batch(vocab: int, sft: bool) -> list[TrainSeq]:
    """Rank 0's share (even indices) is 3 long conversations, 3 micro-batches at a 64-token
    budget; rank 1's is 3 short ones, 1 micro-batch: the ranks must still pass in step."""
    rng = random.Random(0)
    seqs = []
    for i in range(6):
        p, r = (40, 20) if i % 2 == 0 else (6, 4)
        old = None if sft else [-rng.uniform(0.5, 3.0) for _ in range(r)]
        seqs.append(TrainSeq([rng.randrange(vocab) for _ in range(p)], [rng.randrange(vocab) for _ in range(r)],
                             old, 1.0 if sft else rng.choice((0.75, -0.5, 0.25)), i // 2))
    return seqs


def rank_main(rank: int, world: int, port: int, model_dir: str, sft: bool, out: str) -> None:
    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy = Policy(model_dir, CFG, fsdp="mean" if sft else "sum")
    seqs = uneven_batch(policy.model.config.vocab_size, sft)
    mine = list(range(rank, len(seqs), world))
    if sft:  # each rank its own shard of the data
        policy.step([seqs[i] for i in mine], sft=True)
    else:  # the whole batch's weights, this rank's conversations
        policy.step(seqs, mine)
    grads = {n: p.grad.full_tensor() for n, p in policy.model.named_parameters() if p.requires_grad}
    weights, state = policy.weights(), policy.training_state()
    if rank == 0:
        torch.save({"grads": grads, "weights": weights, "state": state}, f"{out}/fsdp.pt")
    dist.barrier()
    # a fresh sharded policy restored from that checkpoint holds the same weights
    restored = Policy(model_dir, CFG, fsdp="mean" if sft else "sum")
    restored.load_training_state(torch.load(f"{out}/fsdp.pt", weights_only=True)["state"])
    again = restored.weights()
    if rank == 0:
        torch.save(again, f"{out}/restored.pt")
    dist.barrier()
    dist.destroy_process_group()
    # skip the interpreter's teardown: gloo's threads met at exit have aborted a rank now and then
    # ("terminate called without an active exception", SIGABRT) after all its work was done
    os._exit(0)


@pytest.mark.parametrize("sft", [False, True], ids=["rl-summed", "sft-averaged"])
def test_sharded_step_is_the_whole_batch_step_and_checkpoints_round_trip(tmp_path, tiny_model_dir, sft):
    mp.start_processes(rank_main, args=(2, free_port(), str(tiny_model_dir), sft, str(tmp_path)), nprocs=2,
                       start_method="spawn")
    torch.manual_seed(0)
    alone = Policy(str(tiny_model_dir), CFG)
    seqs = uneven_batch(alone.model.config.vocab_size, sft)
    if sft:  # averaged over ranks: the mean of the two shards' gradients
        want = {}
        for r in range(2):
            one = Policy(str(tiny_model_dir), CFG)
            one.step([seqs[i] for i in range(r, len(seqs), 2)], sft=True)
            for n, p in one.model.named_parameters():
                if p.requires_grad:
                    want[n] = want.get(n, 0) + p.grad / 2
    else:
        alone.step(seqs)
        want = {n: p.grad for n, p in alone.model.named_parameters() if p.requires_grad}
    got = torch.load(tmp_path / "fsdp.pt", weights_only=True)
    assert any(g.abs().sum() > 0 for g in want.values())
    for name, g in want.items():
        assert torch.allclose(got["grads"][name], g, rtol=1e-4, atol=1e-6), name
    # the gathered weights are a whole model's (every key, full shapes), and the restored policy's equal them
    ref = alone.model.state_dict()
    if alone.model.config.tie_word_embeddings:  # stored once, as an HF folder stores it
        ref.pop("lm_head.weight")
    assert set(got["weights"]) == set(ref) and all(got["weights"][k].shape == ref[k].shape for k in ref)
    restored = torch.load(tmp_path / "restored.pt", weights_only=True)
    assert all(torch.equal(restored[k], got["weights"][k]) for k in ref)
