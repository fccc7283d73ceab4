"""Batch QA without Serve: `memagent batch --runner data` against the Serve job and the engine ceiling.

    .venv/bin/python benchmarks/batch_data.py --quick     # ~6 min on 2 idle cores (three engine starts)
    nice -n 10 .venv/bin/python benchmarks/batch_data.py  # full size

The same rows (benchmarks/serve.py's workload: questions over generated documents of mixed
length), the same engine settings and CPU share (one vLLM CPU engine, SmolLM2-135M, greedy):
  (a) data: `memagent batch --runner data` as a user runs it (its own process and local Ray);
      documents/hour over the span its shards were being answered (the job's own figure);
  (b) serve: the same rows as a job through the Serve app (POST /v1/jobs), after its replica is up;
  (c) ceiling: the very prompts (a) produced (rebuilt from its memory traces), as one flat batch
      on one engine in a Ray task with a replica's CPUs (benchmarks/serve.py's ceiling); it runs
      between (a) and (b), and the load average at each phase's start is printed.
Wall seconds (start-up included) are printed beside each. Last line, JSON: documents/hour of
each, data_vs_ceiling, serve_vs_ceiling, data_vs_serve.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import REPO, finish  # noqa: E402
from benchmarks.serve import FULL, Size, batch, ceiling, overrides, rebuilt_prompts, write_rows  # noqa: E402

QUICK = Size(32, (200, 700), 256, 32, 16, {})  # two shards of 16: 32 loops in flight, as the app's job has


def settings(size: Size, work: Path) -> list[str]:
    return [*overrides(size, str(work / "state")), f"track.tracking_uri=sqlite:///{work / 'mlflow.db'}"]


def data_job(rows: Path, out: Path, sets: list[str]) -> tuple[dict, float]:
    """(the job's status, wall seconds) of the data runner as its command."""
    from pipelines.serve.jobstore import JobStore

    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pipelines.cli", "batch", "--runner", "data", "--input", str(rows),
                           "--output", str(out), *sets], cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"data runner failed: {proc.stderr[-2000:]}")
    return JobStore().load(str(out)).public(), wall


def serve_job(cfg, rows: Path, out: Path) -> tuple[dict, float]:
    """(the job's status, wall seconds from the app's start to the job's end)."""
    import httpx

    from pipelines.serve import app

    start = time.perf_counter()
    url = app.start(cfg, port=18732)
    try:
        with httpx.Client(base_url=url, timeout=3600) as client:
            st = batch(client, rows, out)
    finally:
        app.stop(cfg, shutdown_ray=False)
    return st, time.perf_counter() - start


def ceiling_s(cfg, prompts) -> float:
    """The flat batch's seconds, in a Ray task with a replica's CPUs (as in benchmarks/serve.py)."""
    import ray

    run = ray.remote(num_cpus=cfg.serve.replica_cpus)(lambda c, ps: asyncio.run(ceiling(c, ps)))
    return ray.get(run.remote(cfg, prompts))


def main(argv: list[str]) -> dict:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    size = QUICK if p.parse_args(argv).quick else FULL
    import ray

    from pipelines.config import load_config

    work = Path(tempfile.mkdtemp(prefix="batch-data-bench-"))
    rows = work / "rows.jsonl"
    write_rows(rows, size)
    sets = settings(size, work)
    cfg = load_config(overrides=sets)
    os.environ.pop(cfg.serve.token_env, None)
    load = {"data": os.getloadavg()[0]}
    data, data_wall = data_job(rows, work / "out-data", sets)
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    try:  # the ceiling between the two jobs: drift on a shared machine hits both sides alike
        load["ceiling"] = os.getloadavg()[0]
        prompts = rebuilt_prompts(work / "out-data", rows, cfg)
        ceil = ceiling_s(cfg, prompts)
        load["serve"] = os.getloadavg()[0]
        served, serve_wall = serve_job(cfg, rows, work / "out-serve")
    finally:
        ray.shutdown()
    print(f"1-minute load average at the start of each phase: {load} (2 cores here: above 2, shared)")
    return report(size, data, data_wall, served, serve_wall, ceil, prompts)


def report(size: Size, data: dict, data_wall: float, served: dict, serve_wall: float, ceil: float, prompts) -> dict:
    assert data["done"] == served["done"] == size.rows and data["errors"] == served["errors"] == 0, (data, served)
    per_hour = {"data": data["documents_per_s"] * 3600, "serve": served["documents_per_s"] * 3600,
                "ceiling": size.rows / ceil * 3600}
    print(f"workload: {size.rows} questions, documents of {size.doc_tokens[0]}-{size.doc_tokens[1]} tokens, chunk "
          f"{size.chunk}, memory {size.memory}, final {size.final}, {len(prompts)} turns; one engine each")
    print(f"(a) data runner: {per_hour['data']:.0f} documents/hour, {data['tokens_per_s']:.0f} document tokens/s "
          f"({data_wall:.0f} s wall with Ray and engine start)")
    print(f"(b) serve job:   {per_hour['serve']:.0f} documents/hour, {served['tokens_per_s']:.0f} document tokens/s "
          f"({serve_wall:.0f} s wall with app start)")
    print(f"(c) ceiling:     {per_hour['ceiling']:.0f} documents/hour ({ceil:.1f} s for the same prompts, one flat batch)")
    ratio = {k: round(per_hour[a] / per_hour[b], 3) for k, a, b in
             [("data_vs_ceiling", "data", "ceiling"), ("serve_vs_ceiling", "serve", "ceiling"),
              ("data_vs_serve", "data", "serve")]}
    print(f"data / ceiling {ratio['data_vs_ceiling']:.2f}x, serve / ceiling {ratio['serve_vs_ceiling']:.2f}x, "
          f"data / serve {ratio['data_vs_serve']:.2f}x")
    figures = {**{f"{k}_documents_per_hour": round(v) for k, v in per_hour.items()}, **ratio,
               "data_wall_s": round(data_wall, 1), "serve_wall_s": round(serve_wall, 1), "rows": size.rows}
    finish(figures)
    return figures


if __name__ == "__main__":
    main(sys.argv[1:])
