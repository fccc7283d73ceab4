"""HotpotQA long documents (MemAgent's training / RULER-HotpotQA construction).

A question's 2 gold + 8 distractor paragraphs, plus random paragraphs of other questions
up to the target length, each "Document i:\\n{title}\\n{text}", shuffled by seed.
Questions are split into train / eval by a fixed hash of their id, so the splits never
share a question whatever the seed.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from pipelines.errors import UserError
from pipelines.ingest.builders.common import (Count, Sample, fit_units, in_eval_split, package_file, rng_for,
                                              take_fitting, truncate_to)

DATA = ("long_context_eval", "data", "synthetic", "json", "hotpotqa.json")
SEP = "\n\n"


def paragraph(title: str, sentences: list[str]) -> str:
    return f"{title}\n{''.join(sentences)}"


def render(paragraphs: list[str]) -> str:
    return SEP.join(f"Document {i}:\n{p}" for i, p in enumerate(paragraphs, 1))


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
        for _ in range(4):
            extra = take_fitting(fill, aim - n, self.count, sep_tokens=5, tries=200)
            docs += extra
            n = self.count(render(docs))
            if not extra or aim - n <= target // 200:
                break
        if aim - n > target // 200:  # the gap is smaller than any paragraph: cut one
            docs.append(truncate_to(next(fill), aim - n - 6, self.count))
        rng.shuffle(docs)
        text, n = fit_units(docs, target, self.count, render, frozenset(own), trim=True)
        return Sample(q["question"], [q["answer"]], "one_of", text, n)

    def samples(self, split: str, target: int, n: int, seed: int) -> Iterator[tuple[str, Sample]]:
        made = 0
        for q in self.candidates(split, seed):
            if made == n:
                return
            if (s := self.sample(q, target, seed)) is not None:
                made += 1
                yield q["_id"], s
        raise UserError(f"--n {n}: only {made} hotpotqa {split} questions fit in {target} tokens")
