"""Cost of the memory agent against document length: linear time, flat memory.

The same question over documents of N, 2N, 4N, 8N tokens, each through `memagent ask`'s
code path in a fresh process (loop seconds from its JSON; peak RSS of its process tree,
engine included). Beside it, the same model reading the whole document in one prompt
where it fits the window.

    .venv/bin/python benchmarks/agent_scaling.py            # N = 7000 tokens (about 25 min here)
    .venv/bin/python benchmarks/agent_scaling.py --quick    # N = 1500, small budgets
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

from benchmarks.common import MB, REPO, finish, run_measured  # noqa: E402

PY = sys.executable


def ask_once(doc: str, question: str, overrides: list[str]) -> tuple[dict, int]:
    cmd = [PY, "-m", "pipelines.cli", "ask", "--doc", doc, "--question", question, "--json", *overrides]
    proc, peak = run_measured(cmd, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    if proc.returncode != 0:
        sys.exit(f"ask failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1]), peak


def full_document(doc: str, question: str, overrides: list[str], max_tokens: int) -> dict:
    """One prompt holding the whole document; seconds is None where it does not fit the window."""
    from transformers import AutoTokenizer

    from pipelines.agent.codec import ChatCodec
    from pipelines.config import load_config
    from pipelines.engine import GenRequest, Sampling, create_engine
    from pipelines.models import resolve_model

    cfg = load_config(None, overrides)
    model_dir = str(resolve_model(cfg.model.path, cfg.home_path))
    msgs = [{"role": "user", "content": f"{open(doc).read()}\n\nQuestion: {question}"}]
    n = len(ChatCodec(AutoTokenizer.from_pretrained(model_dir)).encode_chat(msgs))
    if n + max_tokens > cfg.engine.max_model_len:
        return {"prompt_tokens": n, "seconds": None}

    async def go():
        engine = create_engine(model_dir, cfg.engine)
        try:
            start = time.perf_counter()
            await engine.generate(GenRequest(Sampling(max_tokens=max_tokens), messages=msgs))
            return time.perf_counter() - start
        finally:
            await engine.close()

    return {"prompt_tokens": n, "seconds": asyncio.run(go())}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--n", type=int, help="base document length N in tokens")
    a = p.parse_args()
    from pipelines.ingest.builders.needle_file import write_needle_document

    n = a.n or (1500 if a.quick else 7000)
    budgets = ["agent.chunk_size=512", "agent.memory_budget=32", "agent.final_budget=16"] if a.quick else \
        ["agent.chunk_size=2048", "agent.memory_budget=128", "agent.final_budget=64"]
    overrides = ["engine.cpu_kvcache_gib=1", *budgets]
    rows = []
    for mult in (1, 2, 4, 8):
        doc = REPO / ".memagent" / "bench" / f"scaling-{n * mult}.txt"
        question, _ = write_needle_document(doc, n * mult, seed=mult)
        out, peak = ask_once(str(doc), question, overrides)
        full = full_document(str(doc), question, overrides, 64)
        rows.append({"mult": mult, "doc_tokens": out["doc_tokens"], "turns": out["turns"],
                     "seconds": out["seconds"], "peak_rss_mb": peak / MB, "full_doc": full})
        f = f"{full['seconds']:.1f} s" if full["seconds"] is not None else "does not fit"
        print(f"{mult}N: {out['doc_tokens']:>7} tokens, {out['turns']:>3} turns, memagent {out['seconds']:7.1f} s, "
              f"peak RSS {peak / MB:7.0f} MB | whole document in one prompt: {f}", flush=True)
    t8 = rows[-1]["seconds"] / rows[0]["seconds"]
    growth = rows[-1]["peak_rss_mb"] / rows[0]["peak_rss_mb"] - 1
    print(f"\nt(8N)/t(N) = {t8:.2f} (linear: 8; target <= 8.8); peak RSS growth N -> 8N: {growth:+.1%} (target <= 10%)")
    finish({"t8_over_t1": round(t8, 3), "rss_growth": round(growth, 4),
            "rows": [{k: v for k, v in r.items() if k != "full_doc"} | {"full_doc_s": r["full_doc"]["seconds"]} for r in rows]})


if __name__ == "__main__":
    main()
