"""How learnable the squad task's reading is: a word-overlap retriever on the learning suite's rows.

For each held-out row (the ladder's eval rows: the same builder, seed and tokenizer as `memagent
eval`), the document's sentence sharing the most words with the question (stop words dropped) is
picked, and the row counts when that sentence holds a gold answer. No model: a floor for what
the memory agent's memory should hold (its cells' `answer_recall` is the share of final memories
holding an answer), and a measure of how much harder longer documents make the choice.

    .venv/bin/python benchmarks/squad_overlap.py          # 1K and 4K n=200, 16K n=64 (a minute or two)

With --evidence-rows OUT it also writes the 1K rows (the first length's) as task rows whose whole
document is the sentence holding the answer: perfect selection, so `memagent eval --dataset OUT
--tasks squad --lengths 1K` on them measures what a model does with the evidence in hand (the
memory agent: one chunk, one memory write, the answer; truncation: the sentence read directly).

With --memories CELL... it reads memory-agent cells of squad (their folders, as `memagent eval`
writes them) and says where their final memories come from, against the same rows: the share
holding an answer, sharing no content word with the question, being the document's most
question-like sentence, and the chunk (of the cell's chunk size) each was read in. A model that
learned the traces' choice keeps question-like sentences from any chunk.

Last line JSON: {"recall": {length: [mean %, lo, hi, n]}, "memories": {cell: {what: % of rows}}}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402


def best_sentence(question: str, document: str) -> str:
    from pipelines.ingest.builders.squad import content_words, sentence_bounds

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
    p.add_argument("--evidence-rows", help="write the first length's rows, each document cut to its answer's sentence")
    p.add_argument("--memories", nargs="+", default=[], metavar="CELL",
                   help="memory-agent cell folders of squad: where their final memories come from (no recall run)")
    args = p.parse_args()
    tok = AutoTokenizer.from_pretrained(config_model_dir(load_config(None, [])))
    if args.memories:
        finish({"memories": {cell: memory_origins(Path(cell), tok) for cell in args.memories}})
        return
    recall = {}
    for item in args.lengths.split(","):
        length, n = item.split(":")
        hits = [float(any(a.lower() in best_sentence(r.question, r.context).lower() for a in r.answers))
                for r in built_rows("squad", parse_length(length), int(n), 0, tok)]
        m, lo, hi = mean_ci(hits)
        recall[length] = [round(100 * m, 1), round(100 * lo, 1), round(100 * hi, 1), len(hits)]
        print(f"squad {length}: the most question-like sentence holds an answer in {recall[length][0]}% "
              f"[{recall[length][1]}, {recall[length][2]}] of {len(hits)} rows", flush=True)
    if args.evidence_rows:
        length, n = args.lengths.split(",")[0].split(":")
        write_evidence_rows(built_rows("squad", parse_length(length), int(n), 0, tok), args.evidence_rows, tok)
    finish({"recall": recall})


def memory_origins(cell: Path, tok) -> dict[str, float]:
    """% of a memory-agent cell's rows whose final memory holds an answer, shares no content word
    with the question, is the document's most question-like sentence, is the initial memory, is no
    sentence of the document, or was read in chunk k; beside them, how often a sentence drawn at
    random from the document shares no content word with the question."""
    import json
    from collections import Counter

    import pandas as pd

    from pipelines.agent.reward import normalize_answer
    from pipelines.agent.templates import get_templates
    from pipelines.eval.rows import built_rows
    from pipelines.eval.stats import parse_length
    from pipelines.ingest.builders.squad import content_words, sentence_bounds

    (path,) = cell.glob("cells/squad/*/memagent.parquet")
    df = pd.read_parquet(path)
    agent = json.loads((cell / "meta.json").read_text())["agent"]
    initial = get_templates(agent["template"]).initial_memory
    rows = {r.sample_id: r for r in built_rows("squad", parse_length(df.length.iloc[0]), len(df), 0, tok)}
    seen: Counter = Counter()
    for sid, memories in zip(df.sample_id, df.memory):
        row, memory = rows[sid], memories[-1].rsplit("\n", 1)[-1].strip()
        question = content_words(row.question)
        seen["holds an answer"] += any(normalize_answer(a) in normalize_answer(memory) for a in row.answers)
        seen["shares no content word with the question"] += not question & content_words(memory)
        seen["is the most question-like sentence"] += best_sentence(row.question, row.context).strip().endswith(memory)
        at = row.context.find(memory[:60])
        origin = ("initial memory" if memory == initial.strip() else "not from the document" if at < 0 else
                  f"read in chunk {len(tok.encode(row.context[:at], add_special_tokens=False)) // agent['chunk_size'] + 1}")
        seen[origin] += 1
        sentences = [row.context[a:b] for a, b in sentence_bounds(row.context)]
        seen["(a random sentence of the document shares no content word)"] += sum(
            not question & content_words(x) for x in sentences) / len(sentences)
    shares = {k: round(100 * v / len(df), 1) for k, v in sorted(seen.items())}
    print(f"{cell}: final memories (% of {len(df)} rows): {shares}", flush=True)
    return shares


def answer_sentence(context: str, answers: list[str]) -> str:
    """The sentences from the one where a gold answer first occurs to the one where it ends."""
    from pipelines.ingest.builders.squad import sentence_bounds

    i, gold = min((context.find(a), a) for a in answers if a in context)
    bounds = sentence_bounds(context)
    start = max(a for a, _ in bounds if a <= i)
    return context[start:min(b for _, b in bounds if b >= i + len(gold))]


def write_evidence_rows(rows, out: str, tok) -> None:
    from dataclasses import replace

    from pipelines.data.tasks import write_task_rows

    cut = []
    for r in rows:
        text = answer_sentence(r.context, r.answers)
        cut.append(replace(r, context=text, doc_tokens=len(tok.encode(text, add_special_tokens=False))))
    write_task_rows(cut, out)
    print(f"{len(cut)} rows, each document its answer's sentence: {out}", flush=True)


if __name__ == "__main__":
    main()
