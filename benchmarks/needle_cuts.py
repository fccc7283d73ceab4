"""Where the trained agents' needle answers fail: held-out rows whose queried needle lies whole in
one chunk against rows where a chunk boundary cuts it (key in one chunk, number in the next).

Reads the learning benchmark's memory-agent cells (no model is run); rebuilds each cell's rows
with the same builders and seed to find the needle and cut the document as the agent did.

    .venv/bin/python benchmarks/needle_cuts.py                       # sft and rl, 4K, both needle tasks
    .venv/bin/python benchmarks/needle_cuts.py --results benchmarks/results/learning-cuts --models sft

Last line JSON: {model: {task: {"whole": [correct, n], "cut": [correct, n]}}}.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402
from benchmarks.learning import Cells, scores  # noqa: E402


def cut_rows(task: str, tokens: int, n: int, chunk_size: int) -> dict[str, bool]:
    """sample_id -> whether a chunk boundary cuts the row's queried needle."""
    from transformers import AutoTokenizer

    from pipelines.agent.codec import ChatCodec
    from pipelines.config import load_config
    from pipelines.eval.rows import built_rows
    from pipelines.data.tasks import task_chunks
    from pipelines.models import config_model_dir

    tok = AutoTokenizer.from_pretrained(config_model_dir(load_config()))
    codec, out = ChatCodec(tok), {}
    for row in built_rows(task, tokens, n, 0, tok):
        key = re.search(r"for (\S+) mentioned", row.question).group(1)
        needle = re.search(rf"One of the special magic numbers for {re.escape(key)} is: \d+\.", row.context).group(0)
        out[row.sample_id] = not any(needle in tok.decode(c) for c in task_chunks(row, None, codec, chunk_size))
    return out


def main() -> None:
    from pipelines.eval.stats import parse_length

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results" / "learning"))
    p.add_argument("--models", default="sft,rl")
    p.add_argument("--tasks", default="niah_single,niah_multikey")
    p.add_argument("--length", default="4K")
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--chunk-size", type=int, default=256)  # the needle suite's (benchmarks/learning.py)
    args = p.parse_args()
    summary: dict = {}
    for task in args.tasks.split(","):
        cut = cut_rows(task, parse_length(args.length), args.n, args.chunk_size)
        for model in args.models.split(","):
            folder = Path(args.results) / Cells(model, "memagent", args.length, args.n).name
            rows = scores(folder, task, args.length, "memagent")
            if not rows:
                print(f"needle_cuts: no {task} cell in {folder}", file=sys.stderr)
                continue
            split = {"whole": [0, 0], "cut": [0, 0]}
            for sample_id, strict in rows.items():  # the strict score: "96" for 9601526 is wrong
                kind = split["cut" if cut[sample_id] else "whole"]
                kind[0], kind[1] = kind[0] + int(strict == 1.0), kind[1] + 1
            summary.setdefault(model, {})[task] = split
            print(f"{model:4s} {task:14s} needle whole {split['whole'][0]}/{split['whole'][1]}, "
                  f"cut by a chunk boundary {split['cut'][0]}/{split['cut'][1]}", file=sys.stderr)
    finish(summary)


if __name__ == "__main__":
    main()
