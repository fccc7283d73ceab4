"""Evaluation ladder benchmark: accuracy against document length, the memory agent beside the
no-memory truncation baseline, both on the same model and the same context window.

    .venv/bin/python benchmarks/eval_ladder.py --quick     # 2 tasks x 1K,2K x n=4, a few minutes on 2 cores
    .venv/bin/python benchmarks/eval_ladder.py             # 2 tasks x 4K..64K x n=64 (hours on CPU)
    .venv/bin/python benchmarks/eval_ladder.py --lengths 4K,8K,16K --n 8   # a custom rung set

Both methods see at most `window` tokens per call: the agent reads the document a chunk at a
time, the baseline keeps what fits (head and tail). Both run through the rollout machinery
(one Ray worker actor with a vLLM engine, `rollout.workers` to change) at temperature 0. The figure is how much accuracy each
loses from the shortest to the longest document. Results are resumable cells under the home.
Last line: {"score": "strict", "table": {task: {length: strict}}, "table_truncation": ...,
"table_sub_em_lenient": {task: {length: {method: sub_em}}} (the paper's), "drop_memagent": ...,
"drop_truncation": ...}; committed cells are scored again by `python -m pipelines.eval.rescore FOLDER`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from pipelines.config import load_config  # noqa: E402
from pipelines.eval.ladder import main as eval_main  # noqa: E402
from pipelines.eval.results import RECORD_VERSION  # noqa: E402

QUICK = dict(lengths="1K,2K", n=4, chunk=512, memory=32, final=32)
FULL = dict(lengths="4K,8K,16K,32K,64K", n=64, chunk=2048, memory=128, final=64)


def overrides(size: dict, args) -> list[str]:
    window = size["chunk"] + 2 * size["memory"] + 384  # one memory turn's prompt + output, about
    return [f"model.path={args.model}", "engine.kind=vllm", "engine.max_model_len=4096",
            f"engine.cpu_kvcache_gib={args.kv_gib}", "agent.temperature=0.0",
            f"agent.chunk_size={size['chunk']}", f"agent.memory_budget={size['memory']}",
            f"agent.final_budget={size['final']}", f"eval.tasks=[{args.tasks}]", f"eval.lengths=[{size['lengths']}]",
            f"eval.n={size['n']}", f"eval.seed={args.seed}", "eval.methods=[memagent, truncation]",
            f"eval.window={window}", "eval.concurrency=32", f"eval.out={args.out}", *args.overrides]


def drop(summary: dict, method: str, lengths: list[str], score: str = "strict") -> float:
    """Mean over tasks of score(shortest) - score(longest), in accuracy points (0..1)."""
    drops = [summary[t][lengths[0]][method][score] - summary[t][lengths[-1]][method][score] for t in summary]
    return sum(drops) / len(drops)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--model", default="smollm2")
    p.add_argument("--tasks", default="hotpotqa, niah_single")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--kv-gib", type=int, default=2)
    p.add_argument("--lengths", help="override the preset's lengths, e.g. 4K,8K,16K")
    p.add_argument("--n", type=int, help="override the preset's questions per cell")
    p.add_argument("--out", default=None, help="results folder (default: HOME/bench/eval_ladder-<settings hash>)")
    p.add_argument("overrides", nargs="*", metavar="key=value")
    args = p.parse_args()
    size = {**(QUICK if args.quick else FULL), **{k: v for k, v in (("lengths", args.lengths), ("n", args.n)) if v}}
    cfg = load_config(None, overrides(size, args))
    if args.out is None:  # one folder per setting, so a re-run resumes and a new setting starts fresh
        digest = hashlib.sha1(json.dumps([RECORD_VERSION, *overrides(size, args)]).encode()).hexdigest()[:10]
        args.out = str(cfg.home_path / "bench" / f"eval_ladder-{digest}")
        cfg = load_config(None, overrides(size, args))
    print("command: .venv/bin/python " + " ".join(shlex.quote(a) for a in sys.argv))
    start = time.perf_counter()
    try:
        result = eval_main(cfg)
    except KeyboardInterrupt:  # finished rows are checkpointed; the same command resumes
        sys.exit(f"eval_ladder: interrupted; finished rows are saved under {args.out}, re-run to resume")
    lengths = list(cfg.eval.lengths)
    summary = result["summary"]
    figures = {
        "score": "strict",
        "table": {t: {ln: round(summary[t][ln]["memagent"]["strict"], 4) for ln in lengths} for t in summary},
        "table_truncation": {t: {ln: round(summary[t][ln]["truncation"]["strict"], 4) for ln in lengths}
                             for t in summary},
        "table_sub_em_lenient": {t: {ln: {m: round(summary[t][ln][m]["sub_em"], 4) for m in summary[t][ln]}
                                     for ln in lengths} for t in summary},
        "table_answer_recall": {t: {ln: {m: round(summary[t][ln][m]["answer_recall"], 4) for m in summary[t][ln]}
                                    for ln in lengths} for t in summary},
        "drop_memagent": round(drop(summary, "memagent", lengths), 4),
        "drop_truncation": round(drop(summary, "truncation", lengths), 4),
        "window": cfg.eval.window, "n": cfg.eval.n, "seconds": round(time.perf_counter() - start, 1),
    }
    print(f"accuracy drop {lengths[0]} -> {lengths[-1]} (strict, points, mean over tasks): "
          f"memagent {figures['drop_memagent']:+.3f}, truncation {figures['drop_truncation']:+.3f}")
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
