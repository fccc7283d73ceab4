"""How learnable the squad task's reading is: a word-overlap retriever on the learning suite's rows.

For each held-out row (the ladder's eval rows: the same builder, seed and tokenizer as `memagent
eval`), the document's sentence sharing the most words with the question (stop words dropped) is
picked, and the row counts when that sentence holds a gold answer. No model: a floor for what
the memory agent's memory should hold (its cells' `answer_recall` is the share of final memories
holding an answer), and a measure of how much harder longer documents make the choice.

    .venv/bin/python benchmarks/squad_overlap.py          # 1K and 4K n=200, 16K n=64 (a minute or two)

Last line JSON: {"recall": {length: [mean %, lo, hi, n]}}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402


def best_sentence(question: str, document: str) -> str:
    from pipelines.ingest.builders.squad import sentence_bounds
    from pipelines.learn.traces import content_words

    q = content_words(question)
    return max((document[a:b] for a, b in sentence_bounds(document)), key=lambda s: len(q & content_words(s)))


def main() -> None:
    from transformers import AutoTokenizer

    from pipelines.config import load_config
    from pipelines.eval.rows import built_rows
    from pipelines.eval.stats import mean_ci, parse_length
    from pipelines.models import config_model_dir

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", default="1K:200,4K:200,16K:64", help="LENGTH:N pairs (the squad suite's cells)")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(config_model_dir(load_config(None, [])))
    recall = {}
    for item in args.lengths.split(","):
        length, n = item.split(":")
        hits = [float(any(a.lower() in best_sentence(r.question, r.context).lower() for a in r.answers))
                for r in built_rows("squad", parse_length(length), int(n), 0, tok)]
        m, lo, hi = mean_ci(hits)
        recall[length] = [round(100 * m, 1), round(100 * lo, 1), round(100 * hi, 1), len(hits)]
        print(f"squad {length}: the most question-like sentence holds an answer in {recall[length][0]}% "
              f"[{recall[length][1]}, {recall[length][2]}] of {len(hits)} rows", flush=True)
    finish({"recall": recall})


if __name__ == "__main__":
    main()
