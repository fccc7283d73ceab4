import pytest

from pipelines.agent.reward import (accuracy, answer_recall, default_reward, extract_boxed, lenient_scores,
                                    normalize_answer, recall_all, score, strict_reward)


@pytest.mark.parametrize("text,expected", [
    ("the answer is \\boxed{42}", "42"),
    ("\\boxed{a} then \\boxed{b}", "b"),                      # last box wins
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),                # nested braces
    ("\\boxed{{x}{y}} tail", "{x}{y}"),
    ("no box here", None),
    ("\\boxed{unclosed", None),
    ("\\boxed{ok} and \\boxed{broken", "ok"),                 # unclosed last: fall back
    ("", None),
])
def test_extract_boxed(text, expected):
    assert extract_boxed(text) == expected


def test_strict_reward():
    assert strict_reward("so \\boxed{Paris}", ["paris"]) == 1.0
    assert strict_reward("\\boxed{ Paris }", ["Paris"]) == 1.0
    assert strict_reward("\\boxed{\\text{Paris}}", ["Paris"]) == 1.0
    assert strict_reward("\\boxed{Paris, France}", ["Paris"]) == 0.0  # strict: no substring
    assert strict_reward("Paris", ["Paris"]) == 0.0                   # no box, no reward
    assert strict_reward("\\boxed{London}", ["Paris", "London"]) == 1.0


def test_normalize_answer():
    assert normalize_answer("The  Eiffel-Tower, an icon!") == "eiffeltower icon"


def test_lenient_scores_hand_computed():
    s = lenient_scores("the Eiffel Tower", ["Eiffel Tower"])
    assert s == {"em": 1.0, "sub_em": 1.0, "f1": 1.0}
    s = lenient_scores("It is in Paris France", ["Paris"])
    assert s["em"] == 0.0 and s["sub_em"] == 1.0
    # pred tokens: it is in paris france (5); gold: paris (1); common 1 -> p=1/5 r=1 -> f1=1/3
    assert s["f1"] == pytest.approx(1 / 3)
    s = lenient_scores("London", ["Paris", "london"])
    assert s == {"em": 1.0, "sub_em": 1.0, "f1": 1.0}
    assert lenient_scores("", ["Paris"]) == {"em": 0.0, "sub_em": 0.0, "f1": 0.0}


def test_recall_all():
    assert recall_all("values: 12, 34", ["12", "34", "56"]) == pytest.approx(2 / 3)
    assert recall_all("ABC", ["abc"]) == 1.0
    assert recall_all("x", []) == 0.0


def test_scores_by_answer_kind():
    """One-of rows: lenient scores over the gold answers; all-of rows: recall_all under every name."""
    assert [score(m, "It is Paris.", ["Paris", "Lyon"], "one_of") for m in ("em", "sub_em", "f1")] == [0.0, 1.0, 0.5]
    assert accuracy("paris", ["Paris"], "one_of") == 1.0 and accuracy(None, ["Paris"], "one_of") == 0.0
    assert [score(m, "red and blue", ["red", "blue", "green"], "all_of") for m in ("em", "sub_em", "f1")] == [2 / 3] * 3
    assert accuracy("red", ["red", "blue"], "all_of") == 0.5


def test_answer_recall_reads_the_raw_answer():
    assert answer_recall("I think it is Paris, no box", ["paris"], "one_of") == 1.0
    assert answer_recall("the answer", ["paris"], "one_of") == 0.0
    assert answer_recall("red, green", ["red", "blue"], "all_of") == 0.5


def test_default_reward_by_answer_kind():
    assert default_reward("one_of") is strict_reward
    assert default_reward("all_of")("\\boxed{red, blue}", ["red", "blue", "green"]) == pytest.approx(2 / 3)
    assert default_reward("all_of")("red, blue", ["red"]) == 0.0  # nothing boxed
