"""Rollout throughput: ours (no barrier) vs sequential, step-synchronous and the engine's ceiling.

    .venv/bin/python benchmarks/rollout.py --quick      # ~4 min on 2 idle cores
    nice -n 10 .venv/bin/python benchmarks/rollout.py   # full size
    .venv/bin/python benchmarks/rollout.py --quick engine.kind=hf_batch   # transformers' batching
    python benchmarks/rollout.py --size gpu engine.kind=hf_batch model.path=/some/hf/folder

With engine.kind=hf_batch it needs neither Ray nor vLLM (nor MLflow, FastAPI, boto3): it
runs on a GPU machine that has only torch and transformers (plus pydantic and pyyaml).

One engine (vLLM CPU build, SmolLM2-135M), one length-mixed workload (questions over
documents of 1 to 16 chunks, fixed seed), training temperature, generated tokens/s for:
  (a) sequential: one rollout at a time, turn after turn (the release's quickstart);
      measured on the first few rollouts, since batch-1 speed does not depend on how many;
  (b) step-synchronous: batches of `capacity` rollouts; in a batch every sample's turn k is
      submitted together and all must return before turn k+1 starts; final turns after the
      last chunk step; the next batch starts when the whole batch is done (the release);
  (c) ours: WorkerCore, the code each Ray worker actor runs, with `capacity` loops in
      flight: every rollout is an asyncio task that submits its next turn as soon as the
      previous one returns, and a finished rollout's place goes to the next one at once;
  (d) ceiling: the very prompts (c) produced, as one flat batch with no dependencies.
All four share one engine whose max_num_seqs is `capacity`.
Then (unless --no-rss, or --size gpu) worker RSS (this process + the engine's processes) over many rollouts through (c).
The last line is one JSON object: vs_step_sync = c/b, vs_sequential = c/a, vs_ceiling = c/d,
rss_growth = (RSS at the end - RSS after the first tenth) / RSS after the first tenth.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from dataclasses import dataclass, replace

from pipelines.agent import make_loop
from pipelines.agent.codec import ChatCodec
from pipelines.config import load_config
from pipelines.engine import GenRequest, Sampling, create_engine
from pipelines.engine.driver import run_loop
from pipelines.data.tasks import TaskRow, task_chunks
from pipelines.models import resolve_model
from pipelines.ingest.builders.needle_file import NOISE
from pipelines.rollout.core import RolloutSpec, WorkerCore
from pipelines.rollout.schedule import GroupTask
from pipelines.rollout.rss import process_rss


@dataclass(frozen=True)
class Size:
    questions: int
    group: int
    chunk: int
    memory: int
    final: int
    capacity: int  # sequences in flight: the engine's max_num_seqs, (b)'s batch, (c)'s loops
    sequential: int  # rollouts timed for (a)
    rss_rollouts: int


QUICK = Size(questions=4, group=4, chunk=128, memory=64, final=32, capacity=8, sequential=1, rss_rollouts=50)
FULL = Size(questions=16, group=4, chunk=256, memory=64, final=32, capacity=32, sequential=2, rss_rollouts=1000)
# For one GPU with transformers' batching (no vLLM there): short budgets keep all four modes
# within a few minutes, and 4x more rollouts than slots make (b) run four batches, each waiting
# for its longest document. (Measured there: a step costs 37 ms at 1 row and 89 ms at 16.)
GPU = Size(questions=16, group=4, chunk=512, memory=32, final=16, capacity=16, sequential=2, rss_rollouts=0)
SIZES = {"quick": QUICK, "full": FULL, "gpu": GPU}


def workload(codec: ChatCodec, size: Size, seed: int, max_chunks: int = 16) -> list[TaskRow]:
    """Needle questions over documents of 1..max_chunks chunks (exact token lengths)."""
    rng = random.Random(seed)
    haystack = codec.encode(NOISE * (max_chunks * size.chunk // 20 + 8))
    rows = []
    for i in range(size.questions):
        k = rng.randint(1, max_chunks)
        value = str(rng.randint(1_000_000, 9_999_999))
        cut = rng.randint(0, k * size.chunk - 24)
        text = codec.decode(haystack[:cut]) + f" The special magic number is {value}. " + \
            codec.decode(haystack[cut:k * size.chunk - 24])
        rows.append(TaskRow(f"q{i}", "What is the special magic number?", [value], "one_of", None, text,
                            0, "needle", "bench"))
    return rows


SAMPLING = Sampling(temperature=1.0, logprobs=True)


def sampling(max_tokens: int) -> Sampling:
    return replace(SAMPLING, max_tokens=max_tokens)


def row_loop(core: WorkerCore, row: TaskRow):
    return make_loop(row.question, task_chunks(row, None, core.codec, core.agent.chunk_size), core.codec, core.agent)


async def sequential(engine, core: WorkerCore, rows: list[TaskRow], n: int) -> int:
    tokens = 0
    for i in range(n):
        result = await run_loop(engine, row_loop(core, rows[i % len(rows)]), SAMPLING)
        tokens += sum(len(t.response_ids) for t in result.turns)
    return tokens


async def step_sync(engine, core: WorkerCore, rows: list[TaskRow], group: int, capacity: int) -> int:
    samples = [r for r in rows for _ in range(group)]
    tokens = 0
    for i in range(0, len(samples), capacity):
        tokens += await step_sync_batch(engine, core, samples[i:i + capacity])
    return tokens


async def step_sync_batch(engine, core: WorkerCore, samples: list[TaskRow]) -> int:
    """All samples' turn k together; nobody starts turn k+1 before the slowest returns."""
    loops = [row_loop(core, r) for r in samples]
    finals, tokens = {}, 0
    while True:
        step = []
        for i, loop in enumerate(loops):
            if i in finals or loop.done:
                continue
            req = loop.next_request()
            (finals.__setitem__(i, req) if req.is_final else step.append((loop, req)))
        if not step:
            break
        tokens += await run_step(engine, step)
    tokens += await run_step(engine, [(loops[i], req) for i, req in finals.items()])
    return tokens


async def run_step(engine, step) -> int:
    outs = await asyncio.gather(*(engine.generate(GenRequest(sampling(r.max_tokens), r.prompt_ids)) for _, r in step))
    for (loop, _), out in zip(step, outs):
        loop.feed(out)
    return sum(len(o.token_ids) for o in outs)


async def ours(core: WorkerCore, rows: list[TaskRow], group: int, tag: str = "") -> list:
    spec = RolloutSpec(temperature=1.0)
    return await asyncio.gather(*(core.run_group(GroupTask(f"{r.sample_id}{tag}", r, group), spec) for r in rows))


async def ceiling(engine, groups, agent) -> int:
    """(c)'s prompts, each with its turn's budget, all submitted at once."""
    turns = [t for g in groups for tr in g.trajectories for t in tr.turns]
    outs = await asyncio.gather(*(engine.generate(GenRequest(sampling(t.max_tokens), t.prompt_ids))
                                  for t in turns))
    return sum(len(o.token_ids) for o in outs)


async def timed(coro, label: str) -> tuple[object, float]:
    start = time.perf_counter()
    result = await coro
    seconds = time.perf_counter() - start
    print(f"  {label}: {seconds:.1f} s", file=sys.stderr, flush=True)
    return result, seconds


def small_core(engine, cfg, size: Size) -> WorkerCore:
    """The RSS run: the same engine and worker code, short documents and budgets (many rollouts)."""
    agent = cfg.agent.model_copy(update={"chunk_size": 128, "memory_budget": 8, "final_budget": 4})
    return WorkerCore(engine, agent, loops=size.capacity, name="rss")


async def rss_over_rollouts(core: WorkerCore, size: Size, seed: int, pid: int) -> list[int]:
    """RSS after each tenth of `size.rss_rollouts` rollouts over documents of 1-2 chunks."""
    rows = workload(core.codec, replace(size, questions=50, chunk=128), seed + 1, max_chunks=2)
    n = size.rss_rollouts
    samples, done, batch = [], 0, max(n // 10, 1)
    while done < n:
        await ours(core, [rows[(done + i) % len(rows)] for i in range(batch)], 1, f"-{done}")
        done += batch
        samples.append(process_rss(pid))
    return samples


async def bench(args, size: Size) -> dict:
    cfg = load_config(None, [f"agent.chunk_size={size.chunk}", f"agent.memory_budget={size.memory}",
                             f"agent.final_budget={size.final}", f"engine.max_num_seqs={size.capacity}",
                             "engine.cpu_kvcache_gib=2", "engine.max_model_len=4096", *args.overrides])
    engine = create_engine(str(resolve_model(cfg.model.path, cfg.home_path)), cfg.engine)
    try:
        core = WorkerCore(engine, cfg.agent, loops=size.capacity, name="bench")
        rows = workload(core.codec, size, args.seed)
        await engine.generate(GenRequest(sampling(8), core.codec.encode_user("Warm up.")))
        groups, t_c = await timed(ours(core, rows, size.group), "(c) ours")
        tok_c = sum(t.response_tokens for g in groups for t in g.trajectories)
        tok_b, t_b = await timed(step_sync(engine, core, rows, size.group, size.capacity), "(b) step-synchronous")
        tok_d, t_d = await timed(ceiling(engine, groups, cfg.agent), "(d) ceiling")
        tok_a, t_a = await timed(sequential(engine, core, rows, size.sequential), "(a) sequential")
        rss = []
        if size.rss_rollouts and not args.no_rss:
            rss = await rss_over_rollouts(small_core(engine, cfg, size), size, args.seed, os.getpid())
    finally:
        await engine.close()
    rates = {"a": tok_a / t_a, "b": tok_b / t_b, "c": tok_c / t_c, "d": tok_d / t_d}
    walls = {"a": t_a, "b": t_b, "c": t_c, "d": t_d}
    toks = {"a": tok_a, "b": tok_b, "c": tok_c, "d": tok_d}
    return {"rates": rates, "walls": walls, "tokens": toks, "rss": rss}


def report(out: dict, size: Size, argv: list[str]) -> dict:
    r, w, t = out["rates"], out["walls"], out["tokens"]
    names = {"a": "sequential", "b": "step-synchronous", "c": "ours (no barrier)", "d": "ceiling (flat batch)"}
    print(f"workload: {size.questions} questions x {size.group} rollouts, documents of 1-16 chunks of "
          f"{size.chunk} tokens, memory {size.memory}, final {size.final} tokens, temperature 1.0, "
          f"{size.capacity} sequences in flight")
    for k in "abcd":
        print(f"  ({k}) {names[k]:22s} {t[k]:7d} tokens {w[k]:8.1f} s {r[k]:8.1f} tokens/s")
    rss = out["rss"]
    growth = (rss[-1] - rss[0]) / rss[0] if rss else None
    if rss:
        print(f"worker RSS over {size.rss_rollouts} rollouts of 1-2 chunks (MiB, every tenth): "
              + " ".join(f"{x / 2**20:.0f}" for x in rss))
    result = {"vs_step_sync": r["c"] / r["b"], "vs_sequential": r["c"] / r["a"], "vs_ceiling": r["c"] / r["d"],
              "rss_growth": growth}
    print(f"c/b = {result['vs_step_sync']:.2f} (target >= 1.3), c/a = {result['vs_sequential']:.2f} "
          f"(target >= 5), c/d = {result['vs_ceiling']:.2f} (target >= 0.75)"
          + (f", RSS growth {growth:+.1%}" if rss else ", RSS not measured"))
    print("command: .venv/bin/python benchmarks/rollout.py " + " ".join(argv))
    print(json.dumps({k: None if v is None else round(v, 4) for k, v in result.items()}))
    return result


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a small run (~3 min); same as --size quick")
    p.add_argument("--size", choices=sorted(SIZES), default="full", help="workload shape; gpu: one H200")
    p.add_argument("--capacity", type=int, help="override the size's sequences in flight")
    p.add_argument("--questions", type=int, help="override the size's number of questions")
    p.add_argument("--no-rss", action="store_true", help="skip the RSS run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("overrides", nargs="*", help="config overrides, e.g. engine.max_num_seqs=32")
    args = p.parse_args(argv)
    size = SIZES["quick" if args.quick else args.size]
    size = replace(size, capacity=args.capacity or size.capacity, questions=args.questions or size.questions)
    return report(asyncio.run(bench(args, size)), size, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
