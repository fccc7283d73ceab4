"""Task builders without Ray or a store: determinism, lengths within 2%, gold present, no split overlap,
evidence at its recorded token offsets; task rows of schema versions 1 and 2 read back."""

from __future__ import annotations

import re

import pytest

from pipelines.errors import UserError
from pipelines.ingest.builders import TASKS
from pipelines.ingest.builders.common import in_eval_split, parse_lengths
from pipelines.ingest.builders.hotpotqa import HotpotQA
from pipelines.ingest.builders.ruler import Ruler, ruler_samples
from pipelines.data.tasks import (TASK_SCHEMA_VERSION, V1_COLUMNS, Evidence, TaskRow, read_task_rows,
                                    require_evidence, write_task_rows)

TARGET = 8 * 1024
RULER_TASKS = [t for t in TASKS if t not in ("hotpotqa", "squad", "squad_synth")]


@pytest.fixture(scope="module")
def hotpot(count):
    return HotpotQA(count)


def assert_at_offsets(text: str, evidence: list[Evidence], tokenizer) -> None:
    """Each piece decodes from the document's own tokens at its offset, give or take a token."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    offsets = [e.offset for e in evidence]
    assert offsets == sorted(offsets)
    for e in evidence:
        n = len(tokenizer.encode(e.text, add_special_tokens=False))
        assert e.text in tokenizer.decode(ids[max(0, e.offset - 1):e.offset + n + 1])
        assert e.text not in tokenizer.decode(ids[:e.offset]) and e.text not in tokenizer.decode(ids[e.offset + 2:])


def test_parse_lengths():
    assert parse_lengths("8K, 32k,4096,1M") == [8192, 32768, 4096, 1 << 20]
    with pytest.raises(UserError, match="'8Q' is not a length"):
        parse_lengths("8K,8Q")


@pytest.mark.parametrize("task", RULER_TASKS)
@pytest.mark.parametrize("haystack,values", [("noise", "numbers"), ("essay", "uuids")])
def test_ruler_length_gold_evidence_and_determinism(task, haystack, values, count, tokenizer):
    first = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=3))
    again = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=3))
    other = list(ruler_samples(Ruler(count, haystack, values), task, "eval", TARGET, 2, seed=4))
    assert [s.text for _, s in first] == [s.text for _, s in again]
    assert [s.text for _, s in first] != [s.text for _, s in other]
    assert [s.evidence for _, s in first] == [s.evidence for _, s in again]
    for _, s in first:
        assert abs(count(s.text) - TARGET) <= 0.02 * TARGET and s.tokens == count(s.text)
        assert all(a in s.text for a in s.answers) and s.answers
        assert s.answer_kind == ("one_of" if task in ("niah_single", "niah_multikey") else "all_of")
        if task == "fwe":
            assert s.evidence is None
            continue
        assert_at_offsets(s.text, s.evidence, tokenizer)
        assert all(any(a in e.text for e in s.evidence) for a in s.answers)


@pytest.mark.parametrize("task", ["niah_single", "niah_multikey", "niah_multivalue", "niah_multiquery"])
def test_niah_evidence_is_the_queried_keys_needles_only(task, count):
    for _, s in ruler_samples(Ruler(count), task, "train", 2048, 3, seed=1):
        needles = [m.group(0) for m in re.finditer(r"One of the special magic numbers for \S+ is: \d+\.", s.text)]
        assert len(needles) == (1 if task == "niah_single" else 4)
        asked = [e.text for e in s.evidence]
        if task == "niah_multikey":
            key = s.question.split(" for ")[1].split(" mentioned")[0]
            assert asked == [n for n in needles if f" for {key} is:" in n] and len(asked) == 1
        else:
            assert sorted(asked) == sorted(needles)


def test_multikey_queried_needle_at_any_rank(count):
    ranks = set()
    for _, s in ruler_samples(Ruler(count), "niah_multikey", "train", 1024, 12, seed=0):
        needles = re.findall(r"One of the special magic numbers for \S+ is: \d+\.", s.text)
        ranks.add(needles.index(s.evidence[0].text))
    assert len(ranks) > 1


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


def test_hotpotqa_length_gold_evidence_determinism(hotpot, count, tokenizer):
    rows = list(hotpot.samples("eval", TARGET, 3, seed=1))
    again = list(hotpot.samples("eval", TARGET, 3, seed=1))
    assert [(q, s.text, s.evidence) for q, s in rows] == [(q, s.text, s.evidence) for q, s in again]
    by_id = {q["_id"]: q for q in hotpot.questions}
    for qid, s in rows:
        assert abs(count(s.text) - TARGET) <= 0.02 * TARGET
        assert s.text.startswith("Document 1:\n")
        gold_titles = {t for t, _ in by_id[qid]["supporting_facts"]}
        assert all(f":\n{t}\n" in s.text for t in gold_titles)
        assert s.answers == [by_id[qid]["answer"]]
        if s.answers[0] not in ("yes", "no"):
            assert s.answers[0] in s.text
        context = dict(by_id[qid]["context"])
        facts = [context[t][i].strip() for t, i in by_id[qid]["supporting_facts"] if i < len(context[t])]
        assert sorted(e.text for e in s.evidence) == sorted(facts) and len(facts) >= 2
        assert_at_offsets(s.text, s.evidence, tokenizer)


def test_hotpotqa_splits_disjoint_for_any_seed(hotpot):
    train = {q["_id"] for q in hotpot.candidates("train", 0)}
    evals = {q["_id"] for q in hotpot.candidates("eval", 7)}
    assert not train & evals and len(train) + len(evals) == len(hotpot.questions)
    assert all(in_eval_split(q) for q in evals)


def test_task_rows_keep_evidence_and_read_version_1_files(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [TaskRow("a", "q?", ["7"], "one_of", None, "x is: 7. y", 5, "niah_single", "train",
                    [{"text": "x is: 7.", "offset": 0}]),
            TaskRow("b", "q?", ["z"], "one_of", "doc-b", None, 9, "fwe", "train")]
    assert write_task_rows(rows, str(tmp_path / "v2")) == 2
    back = list(read_task_rows(str(tmp_path / "v2")))
    assert back == rows and back[0].evidence == (Evidence("x is: 7.", 0),) and back[1].evidence is None
    schema = pq.read_schema(tmp_path / "v2" / "part-00000.parquet")
    assert schema.metadata[b"memagent.tasks.schema_version"] == str(TASK_SCHEMA_VERSION).encode() == b"2"
    old = pa.Table.from_pylist([{c: getattr(rows[0], c) for c in V1_COLUMNS}])  # written before version 2
    pq.write_table(old, tmp_path / "v1.parquet")
    (row,) = read_task_rows(str(tmp_path / "v1.parquet"))
    assert row.evidence is None and row.context == "x is: 7. y"
    assert require_evidence(back[0]) == back[0].evidence
    with pytest.raises(UserError, match="^task row 'a': no evidence recorded[^\n]*$"):
        require_evidence(row)
    newer = old.replace_schema_metadata({"memagent.tasks.schema_version": "3"})
    pq.write_table(newer, tmp_path / "v3.parquet")
    with pytest.raises(UserError, match="task schema version 3"):
        list(read_task_rows(str(tmp_path / "v3.parquet")))
    with pytest.raises(UserError, match="task row 'c': bad evidence piece"):
        TaskRow("c", "q?", ["z"], "one_of", None, "t", 1, "t", "train", [{"text": "", "offset": 0}])
