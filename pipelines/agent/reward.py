"""Rule-based verifiers, and the one place that picks one by a row's answer kind.

Any callable `(response: str, answers: list[str]) -> float` is a reward.

- strict_reward: the training verifier (last \\boxed{}, light normalisation, exact match).
- lenient_scores: SQuAD/HotpotQA style on the extracted answer: em, sub_em (the paper's
  "accuracy": a prediction inside the gold counts, so `8` scores 1 against 8624779), token f1,
  each the max over gold answers.
- recall_all: list-all tasks (RULER string_match_all): fraction of gold items present.

The test verifier's scores of a prediction (the extracted \\boxed{} answer), by answer kind
(`one_of`: any gold answer is right; `all_of`: every gold item is needed), SCORES in order:
- strict, the headline everywhere: a row is right when the prediction claims every gold item
  and nothing else. One-of rows: SQuAD's em (normalized prediction equals a gold answer).
  All-of rows: the prediction split into items (LIST_SEPARATORS: commas, semicolons, new
  lines, "and", "&"), each normalized, must be exactly the set of gold items. A gold item that
  itself holds a separator can never match: none of the builders' tasks has one.
- em: = strict (all-of rows: the same set match).
- f1: SQuAD's token f1 (all-of rows: f1 of the predicted items against the gold items).
- sub_em: the paper's, lenient (all-of rows: recall_all, RULER's string_match_all).
For QA tasks (hotpotqa, squad, imported rows) the tables show f1 and sub_em beside the
strict em; for needle and list tasks sub_em alone (f1 of a 7-digit number says nothing).
default_reward is the training reward; answer_recall a diagnostic on the raw answer.
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


SCORES = ("strict", "em", "f1", "sub_em")  # the test verifier's, headline first
SCORE_LABELS = {"strict": "strict", "em": "em", "f1": "f1", "sub_em": "sub_em (paper's, lenient)"}
LIST_SEPARATORS = re.compile(r",|;|\n|&|\band\b", re.IGNORECASE)
LIST_TASKS = ("vt", "fwe")  # with every niah_* task: the synthetic needle and list tasks


def list_items(prediction: str) -> set[str]:
    """An all-of answer's items: split on LIST_SEPARATORS, each normalized, empty ones dropped."""
    return {item for item in map(normalize_answer, LIST_SEPARATORS.split(prediction)) if item}


def _item_f1(prediction: str, answers: list[str]) -> float:
    pred, gold = list_items(prediction), {normalize_answer(a) for a in answers}
    common = len(pred & gold)
    return 0.0 if common == 0 else 2 * common / (len(pred) + len(gold))


def score(name: str, prediction: str | None, answers: list[str], answer_kind: str) -> float:
    """One test score (SCORES) of a prediction; see the module's docstring for each."""
    if name not in SCORES:
        raise ValueError(f"score '{name}': not one of {', '.join(SCORES)}")
    if not prediction or not answers:
        return 0.0
    if answer_kind == "all_of":
        if name == "sub_em":
            return recall_all(prediction, answers)
        if name == "f1":
            return _item_f1(prediction, answers)
        return float(list_items(prediction) == {normalize_answer(a) for a in answers})
    return _best(LENIENT["em" if name == "strict" else name], prediction, answers)


def strict_score(prediction: str | None, answers: list[str], answer_kind: str) -> float:
    """The headline test score: every gold item claimed and nothing else (module docstring)."""
    return score("strict", prediction, answers, answer_kind)


def scores(prediction: str | None, answers: list[str], answer_kind: str) -> dict[str, float]:
    return {name: score(name, prediction, answers, answer_kind) for name in SCORES}


def is_qa(task: str) -> bool:
    """QA tasks (hotpotqa, squad, imported rows) show f1 beside em; needle and list tasks do not."""
    return not task.startswith("niah") and task not in LIST_TASKS


def beside(task: str) -> tuple[str, ...]:
    """The scores a table shows beside the headline strict score for this task."""
    return ("f1", "sub_em") if is_qa(task) else ("sub_em",)


def accuracy(prediction: str | None, answers: list[str], answer_kind: str) -> float:
    """The paper's accuracy (sub_em, lenient), what a trajectory carries."""
    return score("sub_em", prediction, answers, answer_kind)


def answer_recall(answer: str, answers: list[str], answer_kind: str) -> float:
    """Gold found anywhere in the raw answer, boxed or not: a diagnostic for base models that
    rarely box (their sub_em is ~0 whatever they read). Not the paper's accuracy."""
    if answer_kind == "all_of":
        return recall_all(answer, answers)
    text = normalize_answer(answer)
    return float(any(gold and gold in text for gold in (normalize_answer(a) for a in answers)))
