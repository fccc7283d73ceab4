"""Serve: a batch job's throughput against the engine's ceiling, and interactive latency.

    .venv/bin/python benchmarks/serve.py --quick      # ~3 min on 2 cores
    nice -n 10 .venv/bin/python benchmarks/serve.py   # full size

One Serve app (one agent replica = one vLLM CPU engine, SmolLM2-135M, greedy):
  (a) batch: a job of questions over generated documents of mixed length, through
      POST /v1/jobs; document tokens read per second (the job's own figure);
  (b) ceiling: after the app stops, in a Ray task with the replica's CPUs, the very prompts (a) produced (rebuilt from the
      memory traces in its output), with the same budgets, as one flat batch on one
      engine with no dependencies between turns: document tokens per second;
  (c) latency: /v1/answer wall time per request with 1, 8 and 32 concurrent clients.
Last line, JSON: batch_vs_ceiling = a/b, p50_s and p95_s per client count.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import finish  # noqa: E402

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "


@dataclass(frozen=True)
class Size:
    rows: int
    doc_tokens: tuple[int, int]
    chunk: int
    memory: int
    final: int
    requests: dict  # clients -> requests per client


QUICK = Size(16, (200, 700), 256, 32, 16, {1: 2, 8: 1, 32: 1})
FULL = Size(128, (1000, 4000), 1024, 64, 32, {1: 5, 8: 3, 32: 2})


def document(rng: random.Random, tokens: int, i: int) -> str:
    reps = max(1, tokens // 24)
    at = rng.randrange(reps)
    return "".join(f"The code of box {i} is {rng.randint(1000, 9999)}. " if k == at else NOISE for k in range(reps))


def write_rows(path: Path, size: Size) -> None:
    rng = random.Random(0)
    with open(path, "w") as f:
        for i in range(size.rows):
            doc = document(rng, rng.randint(*size.doc_tokens), i)
            f.write(json.dumps({"id": f"r{i}", "question": f"What is the code of box {i}?", "document": doc}) + "\n")


def overrides(size: Size, state: str) -> list[str]:
    return ["engine.kind=vllm", "engine.cpu_kvcache_gib=2", "engine.max_num_seqs=64", "engine.max_model_len=4096",
            f"agent.chunk_size={size.chunk}", f"agent.memory_budget={size.memory}", f"agent.final_budget={size.final}",
            "serve.replicas=1", "serve.replica_cpus=1", "serve.max_ongoing_requests=64",
            "serve.max_queued_requests=64", "serve.job_share=1.0", "serve.shard_rows=16", f"serve.state_dir={state}",
            f"serve.allowed_paths=[{Path(state).parent}]"]  # the job's rows and output live beside the state


def batch(client, rows: Path, out: Path) -> dict:
    job = client.post("/v1/jobs", json={"input": str(rows), "output": str(out)}).json()["job_id"]
    while (st := client.get(f"/v1/jobs/{job}").json())["status"] not in ("done", "failed", "cancelled"):
        time.sleep(0.5)
    assert st["status"] == "done" and st["errors"] == 0, st
    return st


def latency(client, clients: int, per_client: int, doc: str) -> list[float]:
    times: list[float] = []

    def worker():
        for _ in range(per_client):
            t = time.perf_counter()
            r = client.post("/v1/answer", json={"question": "What is the code of box 0?", "document": doc})
            r.raise_for_status()
            times.append(time.perf_counter() - t)

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3)


def rebuilt_prompts(out: Path, rows: Path, cfg) -> list[tuple[list[int], int, int]]:
    """(prompt ids, max tokens, document tokens) of every turn the job ran, from its memory traces."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from pipelines.agent import get_templates
    from pipelines.agent.codec import ChatCodec
    from pipelines.agent.chunking import iter_chunks
    from pipelines.models import resolve_model

    codec = ChatCodec(AutoTokenizer.from_pretrained(resolve_model(cfg.model.path, cfg.home_path)))
    tpl, a = get_templates(cfg.agent.template), cfg.agent
    docs = {json.loads(line)["id"]: json.loads(line) for line in rows.read_text().splitlines()}
    prompts = []
    for r in pq.read_table(out).to_pylist():
        q = docs[r["id"]]["question"]
        chunks = list(iter_chunks([codec.encode(docs[r["id"]]["document"])], a.chunk_size))
        memories = [tpl.initial_memory, *r["memory"]]
        for chunk, memory in zip(chunks, memories):
            prompts.append((codec.encode_user(tpl.update_prompt(q, memory, codec.decode(chunk))), a.memory_budget,
                            len(chunk)))
        prompts.append((codec.encode_user(tpl.final_prompt(q, memories[-1])), a.final_budget, 0))
    return prompts


async def ceiling(cfg, prompts) -> float:
    from pipelines.engine import GenRequest, Sampling, create_engine
    from pipelines.models import resolve_model

    engine = create_engine(str(resolve_model(cfg.model.path, cfg.home_path)), cfg.engine)
    try:
        await engine.generate(GenRequest(Sampling(max_tokens=2), prompt_ids=prompts[0][0]))  # warm-up
        start = time.perf_counter()
        await asyncio.gather(*(engine.generate(GenRequest(Sampling(max_tokens=m), prompt_ids=p))
                               for p, m, _ in prompts))
        return time.perf_counter() - start
    finally:
        await engine.close()


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    size = QUICK if args.quick else FULL
    import httpx
    import ray

    from pipelines.config import load_config
    from pipelines.serve import app

    work = Path(tempfile.mkdtemp(prefix="serve-bench-"))
    rows = work / "rows.jsonl"
    write_rows(rows, size)
    cfg = load_config(overrides=overrides(size, str(work / "state")))
    os.environ.pop(cfg.serve.token_env, None)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:
        url = app.start(cfg, port=18731)
        with httpx.Client(base_url=url, timeout=1800) as client:
            job = batch(client, rows, work / "out")
            doc = document(random.Random(1), size.doc_tokens[0], 0)
            lat = {n: latency(client, n, k, doc) for n, k in size.requests.items()}
        prompts = rebuilt_prompts(work / "out", rows, cfg)
        app.stop(cfg, shutdown_ray=False)
        # Same kind of process and CPU share as the replica: a Ray task.
        run = ray.remote(num_cpus=cfg.serve.replica_cpus)(lambda c, ps: asyncio.run(ceiling(c, ps)))
        ceil_s = ray.get(run.remote(cfg, prompts))
    finally:
        app.stop(cfg)
    doc_tokens = sum(t for _, _, t in prompts)
    ceil_tps = doc_tokens / ceil_s
    return report(size, job, ceil_tps, len(prompts), lat)


def report(size: Size, job: dict, ceil_tps: float, turns: int, lat: dict) -> dict:
    ratio = round(job["tokens_per_s"] / ceil_tps, 3)
    print(f"workload: {size.rows} questions, documents of {size.doc_tokens[0]}-{size.doc_tokens[1]} tokens, "
          f"chunk {size.chunk}, memory {size.memory}, final {size.final}, {turns} turns")
    print(f"(a) batch job:  {job['tokens_per_s']:.0f} document tokens/s, {job['documents_per_s'] * 3600:.0f} documents/hour")
    print(f"(b) ceiling:    {ceil_tps:.0f} document tokens/s (same prompts, one flat batch)")
    print(f"batch / ceiling: {ratio:.2f}x (target >= 0.7x)")
    for n, times in lat.items():
        print(f"(c) {n:>2} clients: p50 {pct(times, 0.5):.2f} s, p95 {pct(times, 0.95):.2f} s over {len(times)} requests")
    figures = {"batch_vs_ceiling": ratio,
               "p50_s": {str(n): pct(t, 0.5) for n, t in lat.items()},
               "p95_s": {str(n): pct(t, 0.95) for n, t in lat.items()},
               "batch_tokens_per_s": round(job["tokens_per_s"], 1),
               "batch_documents_per_hour": round(job["documents_per_s"] * 3600),
               "ceiling_tokens_per_s": round(ceil_tps, 1)}
    finish(figures)
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
