"""Task builders without Ray or a store: determinism, lengths within 2%, gold present, no split overlap."""

from __future__ import annotations

import pytest

from pipelines.errors import UserError
from pipelines.ingest.builders import TASKS
from pipelines.ingest.builders.common import in_eval_split, parse_lengths
from pipelines.ingest.builders.hotpotqa import HotpotQA
from pipelines.ingest.builders.ruler import Ruler, ruler_samples

TARGET = 8 * 1024
RULER_TASKS = [t for t in TASKS if t != "hotpotqa"]


@pytest.fixture(scope="module")
def count(tokenizer):
    backend = tokenizer.backend_tokenizer
    return lambda text: len(backend.encode(text, add_special_tokens=False).ids)


@pytest.fixture(scope="module")
def hotpot(count):
    return HotpotQA(count)


def test_parse_lengths():
    assert parse_lengths("8K, 32k,4096,1M") == [8192, 32768, 4096, 1 << 20]
    with pytest.raises(UserError, match="'8Q' is not a length"):
        parse_lengths("8K,8Q")


@pytest.mark.parametrize("task", RULER_TASKS)
@pytest.mark.parametrize("haystack,values", [("noise", "numbers"), ("essay", "uuids")])
def test_ruler_length_gold_and_determinism(task, haystack, values, count):
    first = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=3))
    again = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=3))
    other = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=4))
    assert [s.text for _, s in first] == [s.text for _, s in again]
    assert [s.text for _, s in first] != [s.text for _, s in other]
    for _, s in first:
        assert abs(count(s.text) - TARGET) <= 0.02 * TARGET and s.tokens == count(s.text)
        assert all(a in s.text for a in s.answers) and s.answers
        assert s.answer_kind == ("one_of" if task in ("niah_single", "niah_multikey") else "all_of")


def test_fwe_answers_are_the_three_most_frequent_words(count):
    from collections import Counter

    for _, s in ruler_samples(Ruler(count), "fwe", "train", TARGET, 2, seed=0):
        top = [w for w, _ in Counter(s.text.split()).most_common(4)]
        freq = Counter(s.text.split())
        assert top[:3] == s.answers and freq[top[2]] > freq[top[3]]


def test_vt_chain_in_order(count):
    _, s = next(ruler_samples(Ruler(count), "vt", "eval", TARGET, 1, seed=0))
    positions = [s.text.index(f"VAR {name} =") for name in s.answers]
    assert positions == sorted(positions)


def test_niah_keys_never_shared_between_splits(count):
    keys = {}
    for split in ("train", "eval"):
        keys[split] = {s.question for _, s in ruler_samples(Ruler(count), "niah_single", split, 1024, 20, seed=0)}
    assert len(keys["train"]) == 20 and not keys["train"] & keys["eval"]


def test_hotpotqa_length_gold_determinism(hotpot, count):
    rows = list(hotpot.samples("eval", TARGET, 3, seed=1))
    again = list(hotpot.samples("eval", TARGET, 3, seed=1))
    assert [(q, s.text) for q, s in rows] == [(q, s.text) for q, s in again]
    by_id = {q["_id"]: q for q in hotpot.questions}
    for qid, s in rows:
        assert abs(count(s.text) - TARGET) <= 0.02 * TARGET
        assert s.text.startswith("Document 1:\n")
        gold_titles = {t for t, _ in by_id[qid]["supporting_facts"]}
        assert all(f":\n{t}\n" in s.text for t in gold_titles)
        assert s.answers == [by_id[qid]["answer"]]
        if s.answers[0] not in ("yes", "no"):
            assert s.answers[0] in s.text


def test_hotpotqa_splits_disjoint_for_any_seed(hotpot):
    train = {q["_id"] for q in hotpot.candidates("train", 0)}
    evals = {q["_id"] for q in hotpot.candidates("eval", 7)}
    assert not train & evals and len(train) + len(evals) == len(hotpot.questions)
    assert all(in_eval_split(q) for q in evals)
