"""Learner speed: one Multi-Conv DAPO step against plain forward+backward of the same tokens.

The batch is real memory-agent conversations: the scripted memory traces of needle rows
(the loop's exact prompts; responses are memories and boxed answers), with behaviour
logprobs and group advantages attached. The ceiling runs the same model on the same tokens,
packed the same way without padding and with logits at the same positions, summing
logprobs instead of the clipped surrogate, with no optimizer: what any learner must pay.
Also: the padding a padded batcher would add, and publishing a policy against writing its
safetensors alone.

    .venv/bin/python benchmarks/learner.py            # SmolLM2-135M, 64 conversations, 3 steps each
    .venv/bin/python benchmarks/learner.py --quick    # 12 conversations, 1 step

It also times a step with every layer trained, with the preset's top 10 of 30 layers, and
with LoRA rank 16 (what freezing and LoRA buy on these cores), and our step with transformers'
own packed attention (a block-diagonal mask over the whole micro-batch) against ours (one causal
call per sequence: pipelines.learn.forward).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import finish  # noqa: E402

PRESET = Path(__file__).resolve().parent.parent / "pipelines" / "configs" / "rl-smollm2.yaml"


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


def ceiling_step(model, batch, budget: int, temperature: float, autocast: bool) -> int:
    from pipelines.learn.forward import response_logprobs
    from pipelines.learn.packing import batch_weights, pack, plan_micro_batches

    weights = batch_weights(batch)
    for micro in plan_micro_batches([len(s) for s in batch], budget):
        response_logprobs(model, pack(batch, micro, "token_mean", weights), temperature, autocast).sum().backward()
    model.zero_grad(set_to_none=True)
    return sum(len(s.response_ids) for s in batch)


def interleaved(fns: dict, steps: int) -> dict[str, float]:
    """Median seconds of each function, run in turn (a warm-up each, then `steps` rounds), so a
    change of load on a shared machine hits every contender alike."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for round_ in range(steps + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if round_:
                times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def write_keeping(model, root: Path, version: int, keep: int) -> None:
    """The plain writer a push is compared with: save_pretrained into a new folder, and remove the
    one `keep` versions back, as the publisher keeps its last `keep` (page-cache writeback then
    costs both alike)."""
    import shutil

    model.save_pretrained(root / f"plain{version}")
    shutil.rmtree(root / f"plain{version - keep}", ignore_errors=True)


def trained_variants(model_dir: str, cfg, batch, steps: int) -> dict[str, float]:
    """Seconds per optimizer step on the same batch: every layer trained, the preset's top 10
    of 30 (freeze_layers=20), LoRA rank 16 on every linear layer of every layer."""
    from pipelines.learn.config import LoraConfig
    from pipelines.learn.policy import Policy

    variants = {"full": {"freeze_layers": 0}, "freeze20": {"freeze_layers": 20},
                "lora16": {"freeze_layers": 0, "lora": LoraConfig(rank=16)}}
    policies = {k: Policy(model_dir, cfg.learn.model_copy(update=v)) for k, v in variants.items()}
    return interleaved({k: (lambda p=p: p.step(batch)) for k, p in policies.items()}, steps)


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

    # The learner as the SmolLM2 RL preset trains it (top 10 layers, 1024-token micro-batches,
    # learn.autocast as resolved here; agent budgets of the learning benchmark), with every core.
    cfg = load_config(str(PRESET), [*args.overrides])
    torch.set_num_threads(os.cpu_count() or 1)
    model_dir = str(config_model_dir(cfg))
    n, steps = (12, 1) if args.quick else (64, 3)
    batch = conversations(model_dir, n, cfg)
    tokens = sum(len(s.response_ids) for s in batch)
    lengths = [len(s) for s in batch]
    policy = Policy(model_dir, cfg.learn, temperature=1.0)
    masked = Policy(model_dir, cfg.learn, temperature=1.0)
    masked.model.config._attn_implementation = "sdpa"
    budget, autocast = cfg.learn.token_budget, policy.autocast
    t = interleaved({"ours": lambda: policy.step(batch), "masked": lambda: masked.step(batch),
                     "ceiling": lambda: ceiling_step(policy.model, batch, budget, 1.0, autocast)}, steps)
    del masked
    padded = padding_fraction(lengths, plan_padded_batches(lengths, budget), padded=True)
    with tempfile.TemporaryDirectory() as d:
        pub = FolderPublisher(d, model_dir, keep=2, frozen=policy.frozen_names())  # as the trainer pushes
        versions, plain = iter(range(1, 100)), iter(range(1, 100))
        w = interleaved({"push": lambda: pub.publish(policy.model, next(versions), weights=policy.weights()),
                         "write": lambda: write_keeping(policy.model, Path(d), next(plain), 2)}, 6)
    del policy
    small = batch[: max(4, n // 4)]
    v = trained_variants(model_dir, cfg, small, 1 if args.quick else 2)
    print(f"batch: {len(batch)} conversations, {sum(lengths)} tokens ({tokens} response tokens), "
          f"{len(plan_micro_batches(lengths, budget))} micro-batches", file=sys.stderr)
    print(f"ours {tokens / t['ours']:.1f} response tokens/s ({t['ours']:.2f} s/step), ceiling "
          f"{tokens / t['ceiling']:.1f} ({t['ceiling']:.2f} s); padded batching would compute {padded:.1%} padding",
          file=sys.stderr)
    print(f"with a block-diagonal mask instead of a call per sequence: {t['masked']:.2f} s/step "
          f"({t['masked'] / t['ours']:.2f}x ours)", file=sys.stderr)
    print(f"push {w['push']:.2f} s vs writing safetensors {w['write']:.2f} s", file=sys.stderr)
    print(f"step on {len(small)} conversations: all layers {v['full']:.2f} s, top 10 of 30 {v['freeze20']:.2f} s "
          f"({v['full'] / v['freeze20']:.2f}x faster), LoRA r16 {v['lora16']:.2f} s "
          f"({v['full'] / v['lora16']:.2f}x)", file=sys.stderr)
    finish({"vs_ceiling": round(t["ceiling"] / t["ours"], 3), "padding_fraction": 0.0,
            "padded_batching_padding": round(padded, 3), "push_s": round(w["push"], 3),
            "push_over_write": round(w["push"] / w["write"], 3), "tokens_per_s": round(tokens / t["ours"], 1),
            "full_over_freeze20": round(v["full"] / v["freeze20"], 3),
            "full_over_lora16": round(v["full"] / v["lora16"], 3), "masked_over_ours": round(t["masked"] / t["ours"], 3)})


if __name__ == "__main__":
    main()
