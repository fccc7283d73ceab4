"""Asynchronous RL against synchronous RL on the same workload: steps per hour.

Both runs are `memagent train` with one rollout worker and one learner on disjoint cores
(one each here; a cluster gives them separate GPUs). Synchronous is admission control at
staleness 0: a batch is generated only once the policy that will train on it is published
(generate, train, push, repeat). Ours is staleness 1: rollout continues while the learner
trains. With G and T the generation and training seconds of one step, measured alone in the
synchronous run (the learner's wait for a batch, and the rest of its step: the optimizer step,
push, report), overlap can give at most (G+T)/max(G,T). Every figure is a mean over the steps
after the first two (start-up, warm-up): means add up (G + T is the synchronous step), medians of
different quantities do not. That bound assumes the two cores do not slow each other down; the run also
measures how much they do (a load on core 1 alone, then with a copy of it busy on core 0: a
cache-held matmul, which reads below 1 on cores that share a physical core, and 64 MiB copies,
below 1 when they share memory bandwidth) and the learner's step in the overlapped run against
its step alone (T overlapped / T alone). A batch's cost follows its memories' lengths (steps
spread +-20%), so it also gives the figure per token trained (`of_ideal_per_token`), which takes
the batches' sizes out.

    .venv/bin/python benchmarks/pipeline.py            # SmolLM2-135M on vLLM, needle rows of 2-4 chunks
    .venv/bin/python benchmarks/pipeline.py --quick    # a tiny random model on the transformers engine
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import finish  # noqa: E402

COMMON = ["rollout.workers=1", "rollout.worker_num_cpus=1", "learn.cpus_per_worker=1", "learn.threads=1",
          "learn.checkpoint_every=1000", "learn.eval_every=0", "rollout.reward=benchmarks.pipeline:varied_reward",
          "track.enabled=false", "learn.task=niah_single", "engine.cpu_cores=0", "learn.cpu_cores=[1]"]
# The SmolLM2 RL preset's workload (configs/rl-smollm2.yaml: 2 groups of 8 rollouts of 2-4 chunks,
# bf16 autocast) from the base model, sized so that G and T are within 1.5x of each other: with
# the preset's top 10 layers and 64-token memories the learner's core took ~3x the rollout's
# (T ~100 s, G ~33 s); with 128-token memories and the top 4 layers, T/G was 1.58 pinned (T 76.8 s,
# G 48.6 s); with 192-token memories T/G was 1.39-1.58 (T 83-88 s, G 56-60 s); so memories get
# 192 tokens (more to generate) and the top 2 layers train (T/G 1.35-1.47 on 2026-12-03). With the
# learner's packed attention T fell to G (T/G 1.05: G 92.7 s, T 97.7 s), where the rollout, with no
# slack, fell behind in the slower steps; 128-token memories cut G by ~20% against T's ~10%, which
# leaves the rollout that slack (T/G ~1.2). Micro-batches of 4096 tokens, not the preset's 1024:
# a quarter of the passes over the frozen weights, which the rollout's core also streams from
# memory (2026-12-04: the learner's step overlapped 1.09x its step alone, against 1.12x at 1024).
PRESET = "configs/rl-smollm2.yaml"
FULL = ["learn.task_n=64", "model.path=smollm2", "agent.memory_budget=128", "learn.freeze_layers=28",
        "learn.token_budget=4096"]
QUICK = ["agent.chunk_size=128", "agent.memory_budget=16", "agent.final_budget=8", "learn.task_lengths=256",
         "learn.task_n=32", "rollout.group_size=2", "rollout.batch_groups=2", "engine.kind=hf", "learn.lr=1e-3",
         "rollout.loops_per_worker=4", "learn.freeze_layers=0", "learn.autocast=false"]


def varied_reward(response: str, answers: list[str]) -> float:
    """Mixed rewards in every group (a base model answers nothing), so no batch is filtered away
    and both runs train on the same number of groups per step."""
    return (len(response) % 5) / 4.0


def run(preset: str | None, overrides: list[str], steps: int, staleness: int) -> list[dict]:
    import ray

    from pipelines.config import load_config
    from pipelines.learn.recipe import TrainRequest
    from pipelines.learn.rl_recipe import main

    cfg = load_config(preset, [*overrides, f"rollout.max_staleness={staleness}"])
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench-pipeline-") as out:
        main(cfg, TrainRequest(steps=steps, out=out), watch=lambda step, m: rows.append(m))
    ray.shutdown()
    return rows


def intervals(rows: list[dict], skip: int) -> list[tuple[float, float]]:
    """(seconds from the previous step's report to this one's, of which waiting for the batch) for
    every step after the first `skip` (start-up, warm-up)."""
    return [(b["time"] - a["time"], b["rollout/wait_s"]) for a, b in zip(rows[skip:], rows[skip + 1:])]


def per_token(rows: list[dict], skip: int) -> tuple[float, float]:
    """(seconds per trained token of the intervals after the first `skip`, of which waiting for
    the batch): takes out the batches' sizes, which vary with the memories' lengths."""
    pairs = list(zip(rows[skip:], rows[skip + 1:]))
    tokens = sum(b["train/tokens_per_s"] * b["train/step_s"] for _, b in pairs)
    return sum(b["time"] - a["time"] for a, b in pairs) / tokens, sum(b["rollout/wait_s"] for _, b in pairs) / tokens


def step_t(rows: list[dict], skip: int) -> float:
    """Mean seconds of the learner's optimizer step plus its weight push, after the first `skip`."""
    return statistics.mean(r["train/step_s"] + r.get("train/weight_push_s", 0.0) for r in rows[skip + 1:])


def _load(kind: str, core: int, seconds: float, out) -> None:
    """Count rounds of one load on one core: `compute` (a float32 matmul held in a core's cache)
    or `memory` (copies of 64 MiB, bound by the memory bandwidth the cores share)."""
    import time

    import torch

    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    a = torch.randn(384, 384) if kind == "compute" else torch.randn(16 << 20)
    b = torch.empty_like(a)
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        if kind == "compute":
            a = torch.tanh(a @ a)
        else:
            b.copy_(a)
        n += 1
    out.put(n)


def core_interference(kind: str, seconds: float = 8.0) -> float:
    """Rounds of a load on core 1 with core 0 busy doing the same, over core 1 alone."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")

    def rounds(cores: list[int]) -> int:
        q = ctx.Queue()
        procs = [ctx.Process(target=_load, args=(kind, c, seconds, q)) for c in cores]
        for proc in procs:
            proc.start()
        counts = [q.get() for _ in procs]
        for proc in procs:
            proc.join()
        return min(counts)

    alone = rounds([1])
    return rounds([1, 0]) / alone


def main_() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--steps", type=int)
    p.add_argument("overrides", nargs="*")
    args = p.parse_args()
    overrides = COMMON + (QUICK if args.quick else FULL) + args.overrides
    if args.quick and not any(o.startswith("model.path=") for o in overrides):
        overrides.append(f"model.path={tiny_model()}")
    steps = args.steps or 8
    skip = 2
    preset = None if args.quick else PRESET
    shared = {k: core_interference(k) if (os.cpu_count() or 1) > 1 else 1.0 for k in ("compute", "memory")}
    sync = run(preset, overrides, steps, 0)
    ours = run(preset, overrides, steps, 1)
    keep_rows({"overrides": overrides, "core_shared_rate": shared, "sync": sync, "ours": ours})
    # G: the learner waiting for the batch (generation alone); T: the rest of its step (alone)
    g = statistics.mean(w for _, w in intervals(sync, skip))
    t = statistics.mean(d - w for d, w in intervals(sync, skip))
    t_alone, t_ours = step_t(sync, skip), step_t(ours, skip)
    ideal = (g + t) / max(g, t)
    s_sync, s_ours = g + t, statistics.mean(d for d, _ in intervals(ours, skip))
    speedup = s_sync / s_ours
    stale = statistics.mean(r["rollout/staleness"] for r in ours[skip + 1:])  # the steps timed
    (sync_tok, g_tok), (ours_tok, _) = per_token(sync, skip), per_token(ours, skip)
    of_ideal_tok = sync_tok / ours_tok / (sync_tok / max(g_tok, sync_tok - g_tok))
    print(f"G {g:.1f} s, T {t:.1f} s per step (measured alone, synchronous run); ideal {ideal:.2f}x", file=sys.stderr)
    print(f"cores: with core 0 busy, core 1 computes at {shared['compute']:.2f} and copies memory at "
          f"{shared['memory']:.2f} of its rate alone; the learner's step overlapped {t_ours:.1f} s = "
          f"{t_ours / t_alone:.2f}x its step alone", file=sys.stderr)
    print(f"synchronous {s_sync:.1f} s/step ({3600 / s_sync:.0f} steps/h), ours {s_ours:.1f} s/step "
          f"({3600 / s_ours:.0f} steps/h): {speedup:.2f}x = {speedup / ideal:.2f} of ideal; staleness {stale:.2f}",
          file=sys.stderr)
    print(f"per token trained (the batches' sizes taken out): {of_ideal_tok:.3f} of ideal", file=sys.stderr)
    finish({"async_over_sync": round(speedup, 3), "ideal": round(ideal, 3), "of_ideal": round(speedup / ideal, 3),
            "of_ideal_per_token": round(of_ideal_tok, 3),
            "staleness_mean": round(stale, 3), "G_s": round(g, 2), "T_s": round(t, 2),
            "T_step_alone_s": round(t_alone, 2), "T_step_overlapped_s": round(t_ours, 2), "core_shared_rate": {k: round(v, 3) for k, v in shared.items()}})


def keep_rows(record: dict) -> None:
    """Every step's metrics of both runs, for reading the figures again later."""
    import json
    import time

    out = Path(__file__).resolve().parent / "results" / "pipeline" / time.strftime("%Y-%m-%dT%H%M%S.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=1, default=str))
    print(f"steps: {out}", file=sys.stderr)


def tiny_model() -> str:
    from transformers import AutoTokenizer

    from pipelines.config import load_config
    from pipelines.models import config_model_dir
    from tests.support import make_tiny_llama

    out = Path(tempfile.gettempdir()) / "memagent-bench-tiny"
    if not (out / "config.json").exists():
        tok = AutoTokenizer.from_pretrained(config_model_dir(load_config()))
        make_tiny_llama(out, tok, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=8192)
    return str(out)


if __name__ == "__main__":
    main_()
