"""The learner on a CUDA GPU (`learn.use_gpu`, and `learn.strategy=fsdp2` over NCCL): the
Multi-Conv DAPO step of `Policy` on a random model of a real shape (Qwen2.5-0.5B's, built from
its config alone: nothing is downloaded; speed and memory do not depend on weight values).

Skipped, with its reason, where torch sees no CUDA device. Needs torch, transformers, pydantic
and pytest only (no Ray, no vLLM: nothing here imports them). On a GPU machine whose Python
lacks the project's other packages, skip the suite's root conftest (it starts servers the
other folders use):

    python -m pytest --noconftest -q tests/gpu
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from tests.support import free_port

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs a CUDA GPU: the learner's loss step (autocast, activation checkpointing) and FSDP2 over "
           "NCCL on a random Qwen2.5-0.5B-shaped model")]

# Qwen2.5-0.5B-Instruct's config.json (shapes only): 494M parameters, tied embeddings, qkv biases.
QWEN25_05B = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                  num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
                  rms_norm_eps=1e-6, tie_word_embeddings=True)
WATCHED = ("model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.bias",
           "model.layers.23.mlp.down_proj.weight", "model.norm.weight")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """A random Qwen2.5-0.5B-shaped model saved as an HF folder (bf16, ~1 GB), as load_model reads one."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("qwen2.5-0.5b-random")
    with torch.device("cuda"):  # random init on the GPU: seconds, not a minute of CPU
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN25_05B)).to(torch.bfloat16)
    model.save_pretrained(out)
    del model
    torch.cuda.empty_cache()
    return out


def learn_config(**overrides):
    from pipelines.learn.config import LearnConfig

    # The cluster preset's learner (configs/cluster-qwen2.5-7b.yaml) at a learning rate that shows in one step.
    base = dict(lr=1e-4, kl_coef=0.001, dtype="float32", autocast=True, token_budget=8192, grad_clip=1.0,
                freeze_layers=0, warmup_steps=0)
    return LearnConfig(**{**base, **overrides})


def conversations(vocab: int, n: int = 8, seed: int = 0) -> list:
    """Memory-agent-like conversations: long chunk-reading prompts, shorter responses, 2 rollouts."""
    from pipelines.learn.packing import TrainSeq

    rng = random.Random(seed)
    out = []
    for i in range(n):
        prompt, response = rng.randint(800, 2500), rng.randint(64, 512)
        out.append(TrainSeq([rng.randrange(vocab) for _ in range(prompt)], [rng.randrange(vocab) for _ in range(response)],
                            None, (0.75, -0.5)[i % 2], i % 2))
    return out


def with_behaviour(policy, seqs: list) -> list:
    """Each conversation with behaviour logprobs near the policy's own (a rollout engine's,
    off by sampling noise), so the importance ratios sit near 1 as in training."""
    from dataclasses import replace

    from pipelines.learn.packing import pack

    gen = torch.Generator().manual_seed(0)
    out = []
    with torch.no_grad():
        for i, s in enumerate(seqs):
            logp = policy._logprobs(policy.model, pack(seqs, [i]).to(policy.device), 1.0).float().cpu()
            out.append(replace(s, old_logprobs=(logp + 0.05 * torch.randn(logp.shape, generator=gen)).tolist()))
    return out


def full(p: torch.Tensor) -> torch.Tensor:
    """A parameter's whole value (FSDP2 shards are DTensors)."""
    return (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().float().clone()


def check_step(policy, batch: list) -> dict:
    """One Policy.step: finite loss and gradient, every watched parameter moved, the
    engine-vs-learner gap measured (the fresh-mask path)."""
    before = {n: full(p) for n, p in policy.model.named_parameters() if n in WATCHED}
    m = policy.step(batch, fresh=[True] * len(batch))
    assert math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0, m
    assert math.isfinite(m["kl"]) and 0.5 < m["ratio_mean"] < 2.0, m
    assert 0 <= m["logprob_mismatch"] < 0.5, m  # the 0.05 noise plus bf16 rounding
    # named again: FSDP2 swaps a unit's registered parameters between sharded and gathered ones
    # (a no-grad forward leaves the root gathered until the next backward frees that copy)
    moved = {n: (full(p) - before[n]).abs().max().item() for n, p in policy.model.named_parameters() if n in WATCHED}
    assert set(moved) == set(WATCHED), moved
    assert all(v > 0 for v in moved.values()), moved
    return m


@pytest.mark.parametrize("options", [{}, {"grad_checkpoint": True}, {"autocast": False, "kl_coef": 0.0}],
                         ids=["autocast", "autocast+checkpointing", "fp32"])
def test_policy_step_on_cuda(model_dir, options):
    from pipelines.learn.policy import Policy

    torch.manual_seed(0)
    policy = Policy(str(model_dir), learn_config(**options), device="cuda")
    assert {p.device.type for p in policy.model.parameters()} == {"cuda"}
    assert policy.ref is None or {p.device.type for p in policy.ref.parameters()} == {"cuda"}
    batch = with_behaviour(policy, conversations(policy.model.config.vocab_size))
    m = check_step(policy, batch)
    assert m["tokens"] == sum(len(s.response_ids) for s in batch)
    sft = policy.step(batch[:2], sft=True)
    held, _ = policy.eval_sft(batch[2:4])
    assert math.isfinite(sft["loss"]) and math.isfinite(held) and held > 0
    print(f"{options or 'autocast'}: step {m['step_s']:.2f} s, {m['seq_tokens'] / m['step_s']:.0f} tokens/s, "
          f"peak {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    del policy
    torch.cuda.empty_cache()


def test_fsdp2_on_one_nccl_rank(model_dir):
    """The sharded path as a Ray Train GPU worker runs it (NCCL; bf16 layers by FSDP mixed
    precision, activation checkpointing), on a process group of one rank: shards on the GPU,
    the agreed micro-batch count reduced over NCCL, a step, the full weights gathered."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    from pipelines.learn.policy import Policy

    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        policy = Policy(str(model_dir), learn_config(grad_checkpoint=True), fsdp="sum", device="cuda")
        params = list(policy.model.parameters())
        assert all(isinstance(p, DTensor) and p.device.type == "cuda" for p in params)
        assert all(isinstance(p, DTensor) for p in policy.ref.parameters())
        batch = with_behaviour(policy, conversations(policy.model.config.vocab_size, seed=1))
        check_step(policy, batch)
        weights = policy.weights()  # collective; rank 0 gets the whole model, the tied head once
        assert "lm_head.weight" not in weights
        assert weights["model.embed_tokens.weight"].shape == (QWEN25_05B["vocab_size"], QWEN25_05B["hidden_size"])
        assert all(t.device.type == "cpu" for t in weights.values())
        state = policy.training_state()
        assert set(state["model"]) and state["optim"]
    finally:
        dist.destroy_process_group()
