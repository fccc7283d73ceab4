"""Rule-based verifiers. Any callable `(response: str, answers: list[str]) -> float` is a reward.

- strict_reward: the training verifier (last \\boxed{}, light normalisation, exact match).
- lenient_scores: the test verifier, SQuAD/HotpotQA style: em, sub_em (the paper's
  "accuracy"), token f1, each the max over gold answers.
- recall_all: list-all tasks (RULER string_match_all): fraction of gold items present.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable

Reward = Callable[[str, list[str]], float]

_BOXED = "\\boxed{"
_LATEX_NOISE = re.compile(r"\\text\{([^{}]*)\}|\\mathrm\{([^{}]*)\}|\\[,;!: ]|\$")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def extract_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...}, nested braces balanced; None if absent or unclosed."""
    start = text.rfind(_BOXED)
    while start != -1:
        depth, i = 1, start + len(_BOXED)
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            return text[start + len(_BOXED) : i - 1]
        start = text.rfind(_BOXED, 0, start)
    return None


def strict_normalize(text: str) -> str:
    text = _LATEX_NOISE.sub(lambda m: m.group(1) or m.group(2) or "", text)
    return "".join(text.lower().split())


def strict_reward(response: str, answers: list[str]) -> float:
    """1.0 if the last boxed answer equals a gold answer after light normalisation, else 0.0."""
    boxed = extract_boxed(response)
    if boxed is None:
        return 0.0
    pred = strict_normalize(boxed)
    return float(any(pred == strict_normalize(a) for a in answers))


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop articles a/an/the, collapse whitespace."""
    text = text.lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def token_f1(pred: str, gold: str) -> float:
    p, g = pred.split(), gold.split()
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def lenient_scores(prediction: str, answers: list[str]) -> dict[str, float]:
    pred = normalize_answer(prediction or "")
    best = {"em": 0.0, "sub_em": 0.0, "f1": 0.0}
    for answer in answers:
        gold = normalize_answer(answer)
        best["em"] = max(best["em"], float(pred == gold))
        sub = bool(pred and gold) and (gold in pred or pred in gold)
        best["sub_em"] = max(best["sub_em"], float(sub or pred == gold))
        best["f1"] = max(best["f1"], token_f1(pred, gold))
    return best


def recall_all(prediction: str, answers: list[str]) -> float:
    if not answers:
        return 0.0
    pred = (prediction or "").lower()
    return sum(a.lower() in pred for a in answers) / len(answers)
