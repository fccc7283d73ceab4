"""learn.grad_checkpoint: activation checkpointing per decoder layer changes memory, not the
step: the same gradients as without it, on a tiny random Llama (CPU; tests/gpu runs it on CUDA)."""

import random

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from pipelines.learn.config import LearnConfig
from pipelines.learn.packing import TrainSeq
from pipelines.learn.policy import Policy
from tests.tiny import TINY_LEARN


def test_checkpointed_step_has_the_plain_steps_gradients(tmp_path):
    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                 num_attention_heads=4, num_key_value_heads=2,
                                 tie_word_embeddings=True)).save_pretrained(tmp_path)
    rng = random.Random(0)
    batch = [TrainSeq([rng.randrange(128) for _ in range(30)], [rng.randrange(128) for _ in range(10)],
                      [-rng.uniform(3.0, 6.0) for _ in range(10)], (0.5, -0.5)[i % 2], i // 2) for i in range(4)]
    grads = []
    for checkpointed in (False, True):
        policy = Policy(str(tmp_path), LearnConfig(lr=1e-3, token_budget=64, grad_checkpoint=checkpointed, **TINY_LEARN))
        assert policy.model.is_gradient_checkpointing == checkpointed and policy.device.type == "cpu"
        m = policy.step(batch)
        assert torch.isfinite(torch.tensor(m["loss"]))
        grads.append({n: p.grad.clone() for n, p in policy.model.named_parameters() if p.requires_grad})
    assert grads[0].keys() == grads[1].keys()
    for name, g in grads[0].items():
        assert g.abs().sum() > 0 and torch.allclose(grads[1][name], g, rtol=1e-5, atol=1e-7), name
