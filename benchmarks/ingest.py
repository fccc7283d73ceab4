"""Ingest benchmark: the Ray Data pipeline against this machine's practical ceiling.

    .venv/bin/python benchmarks/ingest.py --quick      # ~2 min idle: 5 MB and 20 MB corpora
    .venv/bin/python benchmarks/ingest.py              # 50 MB and 200 MB corpora

Starts its own SeaweedFS; uploads a corpus of English text (Paul Graham essays and
HotpotQA paragraphs, in .jsonl and .txt objects); then, in one run:
  - pipeline: `ingest()` s3:// -> s3:// store with the Ray Data runner (Ray already up),
    on the small and on the large corpus, sampling the peak RSS of this process tree
    (driver, Ray workers, raylet);
  - ceiling (run just before and just after the large pipeline run, averaged): one process reads the same large-corpus objects with pyarrow and tokenizes
    them with the same fast tokenizer in batches (its Rust thread pool on all cores), no writes.
Last line: {"ratio_vs_ceiling": pipeline tokens/s / ceiling tokens/s, "rss_growth": peak large / peak small}.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("MEMAGENT_HOME", str(REPO / ".memagent"))

from benchmarks.common import MB  # noqa: E402
from infra.seaweedfs import SeaweedFS  # noqa: E402
from pipelines.rollout.rss import process_rss  # noqa: E402

BUCKET = "bench"


def base_text() -> str:
    from pipelines.ingest.builders.common import package_file

    essays = json.loads(package_file("long_context_eval", "data", "synthetic", "json", "PaulGrahamEssays.json")
                        .read_text())["text"]
    hotpot = json.loads(package_file("long_context_eval", "data", "synthetic", "json", "hotpotqa.json").read_text())
    paras = [" ".join(s) for r in hotpot for _, s in r["context"]]
    return essays + "\n\n" + "\n\n".join(paras)


def make_object(rng: random.Random, base: str, size: int, k: int) -> tuple[str, bytes]:
    if k % 4 == 3:
        start = rng.randrange(len(base) - size)
        return f"doc-{k:04d}.txt", base[start:start + size].encode()
    lines, total, i = [], 0, 0
    while total < size:
        n = rng.randint(2000, 20000)
        start = rng.randrange(len(base) - n)
        line = json.dumps({"id": f"o{k}-{i}", "text": base[start:start + n]}) + "\n"
        lines.append(line)
        total += len(line)
        i += 1
    return f"part-{k:04d}.jsonl", "".join(lines).encode()


def upload_corpus(server: SeaweedFS, prefix: str, total_mb: int, object_mb: int, base: str, seed: int) -> int:
    client, rng = server.client(), random.Random(seed)
    for k in range(max(1, total_mb // object_mb)):
        name, data = make_object(rng, base, object_mb * MB, k)
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{name}", Body=data)
    return total_mb


class PeakRSS:
    """Samples the summed RSS of this process and all its descendants."""

    def __init__(self, every: float = 0.25):
        self.every, self.peak, self._stop = every, 0, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, process_rss(os.getpid()))
            time.sleep(self.every)

    def __enter__(self) -> "PeakRSS":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join()


def run_pipeline(prefix: str, cfg, model: str, home: Path) -> dict:
    from pipelines.ingest.pipeline import ingest

    with PeakRSS() as rss:
        start = time.perf_counter()
        s = ingest(f"s3://{BUCKET}/{prefix}", f"s3://{BUCKET}/store-{prefix}", cfg, model, home)
        seconds = time.perf_counter() - start
    return {"tokens": s.tokens, "docs": s.documents, "seconds": seconds, "tokens_per_s": s.tokens / seconds,
            "peak_rss_mb": rss.peak / MB}


def ceiling_in_child(prefix: str, model_dir: str) -> dict:
    """The ceiling in a fresh process, so its buffers never count in the pipeline's RSS."""
    import multiprocessing as mp

    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(run_ceiling, (prefix, model_dir))


def run_ceiling(prefix: str, model_dir: str, batch_chars: int = 1 << 20) -> dict:
    """Plain loop: read each object with pyarrow, decode, tokenize in batches of ~1 MB of text."""
    from transformers import AutoTokenizer

    from pipelines.storage import resolve

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    fs, root = resolve(f"s3://{BUCKET}/{prefix}")
    import pyarrow.fs as pafs

    infos = sorted((i for i in fs.get_file_info(pafs.FileSelector(root, recursive=True))
                    if i.type == pafs.FileType.File), key=lambda i: i.path)
    tokens, start = 0, time.perf_counter()
    for info in infos:
        with fs.open_input_stream(info.path) as f:
            data = f.read().decode()
        texts = [json.loads(line)["text"] for line in data.splitlines()] if info.path.endswith(".jsonl") else [data]
        batch, size = [], 0
        for t in texts + [None]:
            if t is not None:
                batch.append(t)
                size += len(t)
            if batch and (t is None or size >= batch_chars):
                tokens += sum(len(ids) for ids in tokenizer(batch, add_special_tokens=False)["input_ids"])
                batch, size = [], 0
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--workers", type=int, default=0, help="tokenizer actors (0 = one per CPU)")
    a = p.parse_args()
    small_mb, large_mb, object_mb = (5, 20, 1) if a.quick else (50, 200, 4)
    import ray

    from pipelines.ingest.config import IngestConfig
    from pipelines.models import resolve_model

    home = Path(os.environ["MEMAGENT_HOME"])
    model_dir = str(resolve_model("smollm2", home))
    with tempfile.TemporaryDirectory() as tmp:
        server = SeaweedFS(Path(tmp) / "s3").start()
        os.environ.update(server.env())
        try:
            server.create_bucket(BUCKET)
            base = base_text()
            upload_corpus(server, "small", small_mb, object_mb, base, seed=1)
            upload_corpus(server, "large", large_mb, object_mb, base, seed=2)
            del base
            ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                     runtime_env={"env_vars": {"TOKENIZERS_PARALLELISM": "false", **server.env()}})
            cfg = IngestConfig(runner="ray", workers=a.workers)
            small = run_pipeline("small", cfg, "smollm2", home)
            before = ceiling_in_child("large", model_dir)  # load drifts on shared machines: bracket the run
            large = run_pipeline("large", cfg, "smollm2", home)
            after = ceiling_in_child("large", model_dir)
            ray.shutdown()
            ceiling = {"tokens": after["tokens"], "seconds": (before["seconds"] + after["seconds"]) / 2}
            ceiling["tokens_per_s"] = ceiling["tokens"] / ceiling["seconds"]
        finally:
            server.stop()
    report(a, small_mb, large_mb, small, large, ceiling)


def report(a, small_mb: int, large_mb: int, small: dict, large: dict, ceiling: dict) -> None:
    cmd = f".venv/bin/python benchmarks/ingest.py{' --quick' if a.quick else ''}"
    print(f"command: {cmd}   (cpus: {os.cpu_count()}, load avg: {os.getloadavg()[0]:.1f})")
    print(f"pipeline {small_mb} MB: {small['tokens']} tokens in {small['seconds']:.1f} s "
          f"= {small['tokens_per_s']:,.0f} tok/s, peak RSS {small['peak_rss_mb']:.0f} MB")
    print(f"pipeline {large_mb} MB: {large['tokens']} tokens in {large['seconds']:.1f} s "
          f"= {large['tokens_per_s']:,.0f} tok/s, peak RSS {large['peak_rss_mb']:.0f} MB")
    print(f"ceiling  {large_mb} MB: {ceiling['tokens']} tokens in {ceiling['seconds']:.1f} s "
          f"= {ceiling['tokens_per_s']:,.0f} tok/s (single process, read + tokenize only)")
    out = {"ratio_vs_ceiling": round(large["tokens_per_s"] / ceiling["tokens_per_s"], 3),
           "rss_growth": round(large["peak_rss_mb"] / small["peak_rss_mb"], 3)}
    print(f"ratio vs ceiling: {out['ratio_vs_ceiling']} (target >= 0.8); RSS growth "
          f"{small_mb} -> {large_mb} MB: {out['rss_growth']} (target <= 1.2)")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
