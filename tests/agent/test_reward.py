import pytest

from pipelines.agent.reward import (accuracy, answer_recall, default_reward, extract_boxed, is_qa, lenient_scores,
                                    list_items, normalize_answer, recall_all, score, scores, strict_reward,
                                    strict_score)


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
    """One-of rows: SQuAD's scores over the gold answers, strict = em; all-of rows: the exact item
    set for strict and em, item f1, recall_all for the paper's sub_em."""
    assert scores("It is Paris.", ["Paris", "Lyon"], "one_of") == {"strict": 0.0, "em": 0.0, "f1": 0.5, "sub_em": 1.0}
    assert accuracy("paris", ["Paris"], "one_of") == 1.0 and accuracy(None, ["Paris"], "one_of") == 0.0
    # items {red, blue} against {red, blue, green}: precision 1, recall 2/3 -> f1 0.8
    assert scores("red and blue", ["red", "blue", "green"], "all_of") == pytest.approx(
        {"strict": 0.0, "em": 0.0, "f1": 0.8, "sub_em": 2 / 3})
    assert accuracy("red", ["red", "blue"], "all_of") == 0.5
    with pytest.raises(ValueError, match="not one of"):
        score("accuracy", "x", ["x"], "one_of")


NEEDLE = ["8624779"]


def test_strict_needle_one_digit_wrong_is_wrong():
    assert strict_score("8624778", NEEDLE, "one_of") == 0.0
    assert strict_score("8624779", NEEDLE, "one_of") == 1.0
    assert strict_score(None, NEEDLE, "one_of") == 0.0


def test_strict_needle_with_extra_words_claims_more():
    assert strict_score("The special magic number is 8624779", NEEDLE, "one_of") == 0.0
    assert score("sub_em", "The special magic number is 8624779", NEEDLE, "one_of") == 1.0


def test_a_digit_inside_the_needle_is_right_only_for_the_papers_sub_em():
    """The lenient score's hole: `\\boxed{8}` is inside 8624779, so sub_em counts it."""
    prediction = extract_boxed("\\boxed{8}")
    assert strict_score(prediction, NEEDLE, "one_of") == 0.0
    assert score("sub_em", prediction, NEEDLE, "one_of") == 1.0


def test_strict_all_of_needs_every_item_and_nothing_else():
    gold = ["1234567", "7654321", "5555555"]
    assert strict_score("1234567, 7654321 and 5555555", gold, "all_of") == 1.0
    assert strict_score("5555555; 1234567 & 7654321.", gold, "all_of") == 1.0  # any order, any separator
    assert strict_score("1234567, 7654321", gold, "all_of") == 0.0  # one missing
    assert score("sub_em", "1234567, 7654321", gold, "all_of") == pytest.approx(2 / 3)
    assert strict_score("1234567, 7654321, 5555555, 1111111", gold, "all_of") == 0.0  # one more claimed
    assert strict_score("The numbers are 1234567, 7654321 and 5555555", gold, "all_of") == 0.0


def test_list_items_split_and_normalize():
    assert list_items("Red, the BLUE and\ngreen;;") == {"red", "blue", "green"}
    assert list_items("") == set()


def test_qa_tasks_are_those_not_built_as_needles_or_lists():
    assert is_qa("hotpotqa") and is_qa("squad") and is_qa("my_imported_task")
    assert not is_qa("niah_single") and not is_qa("vt")


def test_answer_recall_reads_the_raw_answer():
    assert answer_recall("I think it is Paris, no box", ["paris"], "one_of") == 1.0
    assert answer_recall("the answer", ["paris"], "one_of") == 0.0
    assert answer_recall("red, green", ["red", "blue"], "all_of") == 0.5


def test_default_reward_by_answer_kind():
    assert default_reward("one_of") is strict_reward
    assert default_reward("all_of")("\\boxed{red, blue}", ["red", "blue", "green"]) == pytest.approx(2 / 3)
    assert default_reward("all_of")("red, blue", ["red"]) == 0.0  # nothing boxed
