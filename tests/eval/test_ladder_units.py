"""Pure pieces of the ladder: lengths, intervals, truncation, table layout, cell plan."""

import math

import pytest

from pipelines.agent.direct import head_tail
from pipelines.errors import UserError
from pipelines.eval.report import flat_metrics, format_table
from pipelines.eval.results import read_cell, summarize, write_cell
from pipelines.eval.rows import nearest_length
from pipelines.eval.stats import mean_ci, paired_diff, parse_length


def test_parse_length():
    assert parse_length("8K") == 8192
    assert parse_length("128k") == 131072
    assert parse_length("1M") == 1048576
    assert parse_length("3000") == 3000
    for bad in ("", "8KB", "-1K", "0", "K"):
        with pytest.raises(UserError, match="length"):
            parse_length(bad)


def test_mean_ci_binary_is_wilson():
    mean, lo, hi = mean_ci([1, 0, 0, 0])  # p=0.25, n=4: Wilson 95% = [0.0456, 0.6994]
    assert mean == 0.25
    assert lo == pytest.approx(0.0456, abs=1e-3) and hi == pytest.approx(0.6994, abs=1e-3)
    mean, lo, hi = mean_ci([0.0] * 10)  # all wrong: the interval still admits some accuracy
    assert (mean, lo) == (0.0, 0.0) and hi == pytest.approx(0.2775, abs=1e-3)


def test_mean_ci_fractional_is_normal():
    mean, lo, hi = mean_ci([0.5, 0.7])  # sd = 0.1414, se = 0.1, half = 0.196
    assert mean == pytest.approx(0.6)
    assert lo == pytest.approx(0.404, abs=1e-3) and hi == pytest.approx(0.796, abs=1e-3)
    assert all(math.isnan(x) for x in mean_ci([]))


def test_paired_diff_uses_the_common_samples_only():
    before = {"a": 0.0, "b": 1.0, "c": 0.0, "d": 0.0, "x": 1.0}
    after = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0, "y": 0.0}
    mean, lo, hi, n = paired_diff(before, after)  # diffs 1, 0, 1, 0: sd 0.577, se 0.289, half 0.566
    assert (n, mean) == (4, 0.5)
    assert lo == pytest.approx(-0.066, abs=1e-3) and hi == pytest.approx(1.066, abs=1e-3)
    assert paired_diff({"a": 1.0}, {"b": 1.0})[3] == 0


def test_head_tail_keeps_both_ends_streamed():
    chunks = [[1, 2, 3], [4, 5, 6], [7, 8, 9, 10]]
    assert head_tail(chunks, 4) == ([1, 2, 9, 10], 10)
    assert head_tail(chunks, 5) == ([1, 2, 8, 9, 10], 10)
    assert head_tail(chunks, 20) == (list(range(1, 11)), 10)
    assert head_tail([[1, 2]], 2) == ([1, 2], 2)


def test_nearest_length_on_log_scale():
    lengths = ["4K", "8K", "16K"]
    assert nearest_length(3000, lengths) == "4K"
    assert nearest_length(6000, lengths) == "8K"
    assert nearest_length(12000, lengths) == "16K"
    assert nearest_length(100000, lengths) == "16K"


def rec(strict, error=None, truncated=False, sub_em=None):
    sub_em = strict if sub_em is None else sub_em
    return {"strict": strict, "sub_em": sub_em, "em": strict, "f1": strict, "error": error, "truncated": truncated,
            "turns": 3}


def test_summarize_and_table_layout():
    summary = {
        ("niah", "4K", "memagent"): summarize([rec(1.0), rec(0.0, sub_em=1.0)]),
        ("niah", "4K", "full"): summarize([rec(1.0), rec(0.0, error="exceeds window")]),
        ("niah", "8K", "memagent"): summarize([rec(0.0), rec(0.0)]),
    }
    assert summary[("niah", "4K", "memagent")]["strict"] == 0.5 and summary[("niah", "4K", "memagent")]["sub_em"] == 1.0
    assert summary[("niah", "4K", "full")]["na"] and summary[("niah", "4K", "full")]["errors"] == 1
    table = format_table(summary, ["niah"], ["4K", "8K"], ["memagent", "full"])
    lines = table.splitlines()
    assert lines[0] == "### niah: strict % [95% interval] (sub_em (paper's, lenient) %), n=2 per cell"
    assert lines[2] == "| method | 4K | 8K |"
    assert lines[4].startswith("| MemAgent (memory loop) | 50.0 [") and lines[4].endswith("] (100.0) | 0.0 [0.0, 65.8] (0.0) |")
    assert lines[5] == "| full document | n/a | - |"
    assert flat_metrics(summary) == {"eval/niah/4K/strict": 0.5, "eval/niah/4K/sub_em": 1.0, "eval/niah/4K/em": 0.5,
                                     "eval/niah/4K/f1": 0.5, "eval/niah/8K/strict": 0.0, "eval/niah/8K/sub_em": 0.0,
                                     "eval/niah/8K/em": 0.0, "eval/niah/8K/f1": 0.0}
    qa = format_table({("hotpotqa", "2K", "memagent"): summarize([rec(1.0)])}, ["hotpotqa"], ["2K"], ["memagent"])
    assert "(f1, sub_em (paper's, lenient) %)" in qa.splitlines()[0] and qa.splitlines()[4].endswith("(100.0, 100.0) |")


def test_a_cell_written_before_the_strict_score_reads_with_it(tmp_path):
    """Old cells lack `strict` and `answer_kind`: the reader scores their stored predictions."""
    old = [{"sample_id": "a", "task": "niah_single", "answers": ["8624779"], "prediction": "8", "em": 0.0,
            "sub_em": 1.0, "f1": 0.0, "error": None},
           {"sample_id": "b", "task": "vt", "answers": ["ABCDE", "FGHIJ"], "prediction": "ABCDE", "em": 0.5,
            "sub_em": 0.5, "f1": 0.5, "error": None}]
    write_cell(old, str(tmp_path / "cell.parquet"))
    needle, chain = read_cell(str(tmp_path / "cell.parquet"))
    assert (needle["strict"], needle["sub_em"], needle["answer_kind"]) == (0.0, 1.0, "one_of")
    assert (chain["strict"], chain["em"], chain["sub_em"], chain["answer_kind"]) == (0.0, 0.0, 0.5, "all_of")


def test_budgets_checked_before_any_engine_starts():
    from pipelines.config import load_config
    from pipelines.eval.ladder import check_budgets, plan

    with pytest.raises(UserError, match="eval.window=9000: larger than engine.max_model_len=8192"):
        check_budgets(load_config(None, ["eval.window=9000"]))
    with pytest.raises(UserError, match="a memory turn would not fit"):
        check_budgets(load_config(None, ["agent.chunk_size=8000"]))
    with pytest.raises(UserError, match="length '8KB'"):
        plan(load_config(None, ["eval.lengths=[8KB]"]))
    with pytest.raises(UserError, match="task 'a': unknown"):
        plan(load_config(None, ["eval.tasks=[a]"]))
    cfg = load_config(None, ["eval.tasks=[a, b]", "eval.lengths=[1K, 2K]", "eval.methods=[memagent]",
                             "eval.dataset=rows.parquet"])  # a dataset may hold any task names
    assert plan(cfg) == [("a", "1K", "memagent"), ("a", "2K", "memagent"), ("b", "1K", "memagent"),
                         ("b", "2K", "memagent")]


def test_command_line_flags_override_config():
    from pipelines.cli import build_parser
    from pipelines.config import load_config
    from pipelines.eval.command import apply_args

    args = build_parser().parse_args(["eval", "--model", "models:/m@champion", "--tasks", "hotpotqa, niah_single",
                                      "--lengths", "8K,16K", "--n", "16", "--methods", "memagent,truncation",
                                      "eval.concurrency=8"])
    cfg = apply_args(load_config(None, args.overrides), args)
    assert cfg.model.path == "models:/m@champion"
    assert cfg.eval.tasks == ("hotpotqa", "niah_single") and cfg.eval.lengths == ("8K", "16K")
    assert (cfg.eval.n, cfg.eval.concurrency, cfg.eval.methods) == (16, 8, ("memagent", "truncation"))
    bad = build_parser().parse_args(["eval", "--methods", "memagent,oracle"])
    with pytest.raises(UserError, match="eval.methods"):
        apply_args(load_config(None, []), bad)


def test_cell_rows_built_on_the_fly_or_from_a_dataset(tokenizer, needle_dataset):
    from pipelines.eval.rows import cell_rows

    rows = list(cell_rows("niah_single", "1K", ["1K", "2K"], 2, 7, None, tokenizer))
    assert len(rows) == 2 and all(r.task == "niah_single" and r.context and r.doc_id is None for r in rows)
    assert all(900 < r.doc_tokens <= 1024 for r in rows)
    assert [r.sample_id for r in cell_rows("niah_single", "1K", ["1K"], 2, 7, None, tokenizer)] == [
        r.sample_id for r in rows]  # the same seed builds the same rows
    essays = list(cell_rows("niah_single", "1K", ["1K"], 2, 7, None, tokenizer, "essay"))
    assert all("/essay" in r.sample_id and "special magic" in r.context for r in essays)
    assert not {r.context for r in essays} & {r.context for r in rows}  # real text, not the noise sentences
    assert all("The grass is green" not in r.context for r in essays)
    picked = list(cell_rows("niah_test", "2K", ["1K", "2K"], 5, 0, needle_dataset, tokenizer))
    assert len(picked) == 3 and all(r.sample_id.startswith("niah-2000-") for r in picked)
    with pytest.raises(UserError, match="task 'nope': unknown"):
        list(cell_rows("nope", "1K", ["1K"], 1, 0, None, tokenizer))


def test_answer_recall_finds_unboxed_gold():
    from pipelines.agent.reward import answer_recall
    from pipelines.data.tasks import TaskRow

    row = TaskRow("s", "q?", ["Charles Guiteau"], "one_of", None, "ctx", 3, "t", "test")
    assert answer_recall("It was charles guiteau, in 1881.", row.answers, row.answer_kind) == 1.0
    assert answer_recall("It was Leon Czolgosz.", row.answers, row.answer_kind) == 0.0
    both = TaskRow("s", "q?", ["red", "blue"], "all_of", None, "ctx", 3, "t", "test")
    assert answer_recall("Red, then green.", both.answers, both.answer_kind) == 0.5
