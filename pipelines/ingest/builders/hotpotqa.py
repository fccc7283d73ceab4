"""HotpotQA long documents (MemAgent's training / RULER-HotpotQA construction).

A question's 2 gold + 8 distractor paragraphs, plus random paragraphs of other questions
up to the target length, each "Document i:\\n{title}\\n{text}", shuffled by seed.
Questions are split into train / eval by a fixed hash of their id, so the splits never
share a question whatever the seed. Evidence: the question's supporting-fact sentences
(the data's `supporting_facts`, [title, sentence index]), where they fall in the document.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pipelines.errors import UserError
from pipelines.ingest.builders.common import (Count, Sample, fill_to, fit_units, in_eval_split, locate, package_file,
                                              rng_for, truncate_to)
from pipelines.data.tasks import Evidence

DATA = ("long_context_eval", "data", "synthetic", "json", "hotpotqa.json")
SEP = "\n\n"


def paragraph(title: str, sentences: list[str]) -> str:
    return f"{title}\n{''.join(sentences)}"


def render(paragraphs: list[str]) -> str:
    return SEP.join(f"Document {i}:\n{p}" for i, p in enumerate(paragraphs, 1))


def supporting_facts(q: dict, text: str, count: Count) -> list[Evidence]:
    """The supporting sentences (stripped) at their places in the rendered document; facts that
    point past a paragraph's sentences (a few in the data) are skipped."""
    spans = []
    for title, sents in q["context"]:
        wanted = {i for t, i in q["supporting_facts"] if t == title and 0 <= i < len(sents)}
        if not wanted:
            continue
        start = text.index(f":\n{paragraph(title, sents)}") + 2 + len(title) + 1
        for i, sent in enumerate(sents):
            if i in wanted and sent.strip():
                spans.append((start + len(sent) - len(sent.lstrip()), sent.strip()))
            start += len(sent)
    return locate(text, spans, count)


class HotpotQA:
    def __init__(self, count: Count):
        self.count = count
        records = json.loads(package_file(*DATA).read_text())
        self.questions = sorted(records, key=lambda r: r["_id"])
        self.pool = [(title, paragraph(title, sents)) for r in self.questions for title, sents in r["context"]]

    def candidates(self, split: str, seed: int) -> list[dict]:
        mine = [q for q in self.questions if in_eval_split(q["_id"]) == (split == "eval")]
        rng_for("hotpotqa", split, seed).shuffle(mine)
        return mine

    def fillers(self, rng, exclude: set[str]) -> Iterator[str]:
        while True:
            title, text = self.pool[rng.randrange(len(self.pool))]
            if title not in exclude:
                exclude.add(title)
                yield text

    def sample(self, q: dict, target: int, seed: int) -> Sample | None:
        """None when the question's own paragraphs alone are longer than target."""
        rng = rng_for("hotpotqa", q["_id"], target, seed)
        own = [paragraph(t, s) for t, s in q["context"]]
        n = self.count(render(own))
        aim = target - max(8, target // 400)
        if n > aim:
            return None
        docs, fill = list(own), self.fillers(rng, {t for t, _ in q["context"]})
        n = fill_to(docs, fill, aim, target, self.count, render)
        if aim - n > target // 200:  # the gap is smaller than any paragraph: cut one
            docs.append(truncate_to(next(fill), aim - n - 6, self.count))
        rng.shuffle(docs)
        text, n = fit_units(docs, target, self.count, render, frozenset(own), trim=True)
        return Sample(q["question"], [q["answer"]], "one_of", text, n, supporting_facts(q, text, self.count))

    def samples(self, split: str, target: int, n: int, seed: int) -> Iterator[tuple[str, Sample]]:
        made = 0
        for q in self.candidates(split, seed):
            if made == n:
                return
            if (s := self.sample(q, target, seed)) is not None:
                made += 1
                yield q["_id"], s
        raise UserError(f"--n {n}: only {made} hotpotqa {split} questions fit in {target} tokens")
