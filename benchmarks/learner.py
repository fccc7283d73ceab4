"""Learner speed: one Multi-Conv DAPO step against plain forward+backward of the same tokens.

The batch is real memory-agent conversations: the scripted memory traces of needle rows
(the loop's exact prompts; responses are memories and boxed answers), with behaviour
logprobs and group advantages attached. The ceiling runs the same model on the same tokens,
packed the same way without padding and with logits at the same positions, summing
logprobs instead of the clipped surrogate, with no optimizer: what any learner must pay.
Also: the padding a padded batcher would add, and publishing a policy against writing its
safetensors alone.

    .venv/bin/python benchmarks/learner.py            # SmolLM2-135M, 64 conversations, 2 steps each
    .venv/bin/python benchmarks/learner.py --quick    # 12 conversations, 1 step
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import finish  # noqa: E402


def conversations(model_dir: str, n: int, cfg) -> list:
    """Real loop conversations of needle rows (2-4 chunks), as the learner's TrainSeqs."""
    from transformers import AutoTokenizer

    from pipelines.agent.codec import ChatCodec
    from pipelines.agent.factory import limits_of
    from pipelines.agent.templates import get_templates
    from pipelines.ingest.builders.build import BuildRequest, inline_rows
    from pipelines.learn.packing import TrainSeq
    from pipelines.learn.traces import iter_traces

    tok = AutoTokenizer.from_pretrained(model_dir)
    codec, backend = ChatCodec(tok), tok.backend_tokenizer
    count = lambda text: len(backend.encode(text, add_special_tokens=False).ids)  # noqa: E731
    rows = [r for t in (512, 768, 1024) for r in inline_rows(
        BuildRequest("niah_single", str(t), n, "", "", split="train"), t, count)]
    rng, seqs = random.Random(0), []
    for rollout, trace in enumerate(iter_traces(rows, None, codec, get_templates("release"), limits_of(cfg.agent),
                                                cfg.agent.chunk_size)):
        adv = rng.choice([-0.5, 0.5])
        for turn in trace.turns:
            lp = [rng.uniform(-2.0, -0.01) for _ in turn.response_ids]
            seqs.append(TrainSeq(turn.prompt_ids, turn.response_ids, lp, adv, rollout))
        if len(seqs) >= n:
            return seqs[:n]
    return seqs


def ceiling_step(model, batch, budget: int, temperature: float) -> int:
    from pipelines.learn.forward import response_logprobs
    from pipelines.learn.packing import batch_weights, pack, plan_micro_batches

    weights = batch_weights(batch)
    for micro in plan_micro_batches([len(s) for s in batch], budget):
        response_logprobs(model, pack(batch, micro, "token_mean", weights), temperature).sum().backward()
    model.zero_grad(set_to_none=True)
    return sum(len(s.response_ids) for s in batch)


def timed(fn, steps: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - start) / steps


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    import torch

    from pipelines.config import load_config
    from pipelines.learn.packing import padding_fraction, plan_micro_batches, plan_padded_batches
    from pipelines.learn.policy import Policy
    from pipelines.learn.weights import FolderPublisher
    from pipelines.models import config_model_dir

    cfg = load_config(None, ["agent.chunk_size=256", "agent.memory_budget=64", "agent.final_budget=32",
                             "learn.token_budget=4096", "learn.freeze_layers=10", *args.overrides])
    torch.set_num_threads(os.cpu_count() or 1)
    model_dir = str(config_model_dir(cfg))
    n, steps = (12, 1) if args.quick else (64, 2)
    batch = conversations(model_dir, n, cfg)
    tokens = sum(len(s.response_ids) for s in batch)
    lengths = [len(s) for s in batch]
    policy = Policy(model_dir, cfg.learn, temperature=1.0)
    t_ours = timed(lambda: policy.step(batch), steps)
    t_ceiling = timed(lambda: ceiling_step(policy.model, batch, cfg.learn.token_budget, 1.0), steps)
    padded = padding_fraction(lengths, plan_padded_batches(lengths, cfg.learn.token_budget), padded=True)
    with tempfile.TemporaryDirectory() as d:
        pub = FolderPublisher(d, model_dir, keep=2)
        t_push = timed(lambda: pub.publish(policy.model, int(time.time() * 1000) % 10**9), 2)
        t_write = timed(lambda: policy.model.save_pretrained(Path(d) / "plain", safe_serialization=True), 2)
    print(f"batch: {len(batch)} conversations, {sum(lengths)} tokens ({tokens} response tokens), "
          f"{len(plan_micro_batches(lengths, cfg.learn.token_budget))} micro-batches", file=sys.stderr)
    print(f"ours {tokens / t_ours:.1f} response tokens/s ({t_ours:.2f} s/step), ceiling {tokens / t_ceiling:.1f} "
          f"({t_ceiling:.2f} s); padded batching would compute {padded:.1%} padding", file=sys.stderr)
    print(f"push {t_push:.2f} s vs writing safetensors {t_write:.2f} s", file=sys.stderr)
    finish({"vs_ceiling": round(t_ceiling / t_ours, 3), "padding_fraction": 0.0,
            "padded_batching_padding": round(padded, 3), "push_s": round(t_push, 3),
            "push_over_write": round(t_push / t_write, 3), "tokens_per_s": round(tokens / t_ours, 1)})


if __name__ == "__main__":
    main()
