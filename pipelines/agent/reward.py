"""Rule-based verifiers, and the one place that picks one by a row's answer kind.

Any callable `(response: str, answers: list[str]) -> float` is a reward.

- strict_reward: the training verifier (last \\boxed{}, light normalisation, exact match).
- lenient_scores: the test verifier, SQuAD/HotpotQA style: em, sub_em (the paper's
  "accuracy"), token f1, each the max over gold answers.
- recall_all: list-all tasks (RULER string_match_all): fraction of gold items present.

By answer kind (`one_of`: any gold answer is right; `all_of`: every gold item is needed):
default_reward (the training reward), score / accuracy (the test verifier; all-of rows score
recall_all under every name), answer_recall (a diagnostic on the raw answer).
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Callable

Reward = Callable[[str, list[str]], float]
ANSWER_KINDS = ("one_of", "all_of")

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


def _best(match: Callable[[str, str], float], prediction: str, answers: list[str]) -> float:
    pred = normalize_answer(prediction or "")
    return max((match(pred, normalize_answer(a)) for a in answers), default=0.0)


def _exact(pred: str, gold: str) -> float:
    return float(pred == gold)


def _sub_exact(pred: str, gold: str) -> float:
    return float((bool(pred and gold) and (gold in pred or pred in gold)) or pred == gold)


LENIENT = {"em": _exact, "sub_em": _sub_exact, "f1": token_f1}


def lenient_scores(prediction: str, answers: list[str]) -> dict[str, float]:
    return {name: _best(match, prediction, answers) for name, match in LENIENT.items()}


def recall_all(prediction: str, answers: list[str]) -> float:
    if not answers:
        return 0.0
    pred = (prediction or "").lower()
    return sum(a.lower() in pred for a in answers) / len(answers)


def boxed_recall(response: str, answers: list[str]) -> float:
    """All-of rows: the fraction of gold items inside the last \\boxed{} (0 when nothing is boxed)."""
    return recall_all(extract_boxed(response) or "", answers)


def default_reward(answer_kind: str) -> Reward:
    """The training reward of a row of this kind."""
    return boxed_recall if answer_kind == "all_of" else strict_reward


def score(name: str, prediction: str | None, answers: list[str], answer_kind: str) -> float:
    """One test score (em, sub_em or f1) of a prediction; all-of rows: recall_all under each name."""
    if answer_kind == "all_of":
        return recall_all(prediction or "", answers)
    return _best(LENIENT[name], prediction or "", answers)


def accuracy(prediction: str | None, answers: list[str], answer_kind: str) -> float:
    """The paper's accuracy (sub_em), what a trajectory carries."""
    return score("sub_em", prediction, answers, answer_kind)


def answer_recall(answer: str, answers: list[str], answer_kind: str) -> float:
    """Gold found anywhere in the raw answer, boxed or not: a diagnostic for base models that
    rarely box (their sub_em is ~0 whatever they read). Not the paper's accuracy."""
    if answer_kind == "all_of":
        return recall_all(answer, answers)
    text = normalize_answer(answer)
    return float(any(gold and gold in text for gold in (normalize_answer(a) for a in answers)))
