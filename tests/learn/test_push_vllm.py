"""A two-shard published version (frozen shard written once and linked, trained shard written each
push) reaches a live vLLM engine through `load_weights`: after the swap the engine's logprobs are
the learner's on the new weights, and before it they were not."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from pipelines.engine.base import GenRequest, Sampling
from pipelines.engine.config import EngineConfig
from pipelines.learn.forward import response_logprobs
from pipelines.learn.packing import TrainSeq, pack
from pipelines.learn.policy import load_model
from pipelines.learn.weights import FolderPublisher


def gap(model, prompt: list[int], resp) -> float:
    seq = TrainSeq(prompt, resp.token_ids, resp.logprobs, 0.0, 0)
    with torch.no_grad():
        learner = response_logprobs(model, pack([seq], [0]), 1.0)
    return (learner - torch.tensor(resp.logprobs)).abs().mean().item()


@pytest.mark.slow
def test_vllm_swaps_in_a_split_version(tmp_path: Path, tokenizer):
    from pipelines.engine.vllm_engine import VLLMEngine
    from tests.support import make_tiny_llama

    model_dir = make_tiny_llama(tmp_path / "m", tokenizer, hidden_size=128, intermediate_size=256,
                                num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
                                max_position_embeddings=2048)  # vLLM's CPU attention needs head_dim 64
    model = load_model(str(model_dir), "float32").eval()
    for p in [*model.model.embed_tokens.parameters(), *model.model.layers[0].parameters()]:
        p.requires_grad_(False)
    frozen = frozenset(n for n, p in model.named_parameters() if not p.requires_grad)
    pub = FolderPublisher(str(tmp_path / "out"), str(model_dir), keep=2, frozen=frozen)
    pub.publish(model, 1)
    torch.manual_seed(0)
    with torch.no_grad():  # the trained layer moves far enough to change what the engine samples
        for p in model.model.layers[1].parameters():
            p.add_(torch.randn_like(p) * 0.5, alpha=1.0)
    uri = pub.publish(model, 2)
    assert (Path(uri) / "frozen.safetensors").stat().st_nlink == 2  # v1's, linked

    async def run():  # fp32 like the learner: bf16 rounding had put the swapped gap near a loose bound
        engine = VLLMEngine(str(model_dir), EngineConfig(kind="vllm", dtype="float32", max_model_len=1024,
                                                         max_num_seqs=4, cpu_kvcache_gib=1))
        try:
            prompt = engine.codec.encode_chat([{"role": "user", "content": "Read this and remember the facts."}])
            sampling = Sampling(max_tokens=32, temperature=1.0, seed=0, logprobs=True)
            before = await engine.generate(GenRequest(sampling, prompt_ids=prompt))
            await engine.load_weights(uri, 2)
            after = await engine.generate(GenRequest(sampling, prompt_ids=prompt))
            return prompt, before, after, engine.version
        finally:
            await engine.close()

    prompt, before, after, version = asyncio.run(run())
    new, old = gap(model, prompt, after), gap(model, prompt, before)
    print(f"engine vs learner on the new weights, mean |logprob difference|: after the swap {new:.4f}, "
          f"before it {old:.4f}")
    assert version == 2 and new < 1e-3 and old > 0.05
