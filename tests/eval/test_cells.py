"""The ladder's cell bookkeeping without Ray: rows chained across cells, results in any order,
a cell complete the moment its last row (scored or quarantined) is in."""

import pytest

from pipelines.eval.cells import CellBook
from pipelines.data.tasks import TaskRow
from pipelines.agent import TurnRecord
from pipelines.rollout.trajectory import Trajectory

A, B = ("niah", "1K", "truncation"), ("niah", "2K", "truncation")


def task_row(i: int) -> TaskRow:
    return TaskRow(f"orig-{i}", f"q{i}?", [f"v{i}"], "one_of", None, "some document " * 50, 100, "niah", "test")


def traj(key: str, answer: str, memory=("m1", "m2"), accuracy: float = 0.0) -> Trajectory:
    turns = [TurnRecord([1], [2], [-0.1], "stop", i == len(memory), 4, 0, 0, 0.1) for i in range(len(memory) + 1)]
    from pipelines.agent.reward import extract_boxed

    return Trajectory(key, f"{key}#1", 0, turns, list(memory), answer, extract_boxed(answer), 0.0, accuracy, True,
                      120, 0.5, "w")


def test_rows_are_renamed_per_cell_and_records_keep_the_original_ids():
    book = CellBook(traces=1)
    rows = {A: [task_row(0), task_row(1)], B: [task_row(0)]}
    stream = book.rows([A, B], rows.__getitem__)
    keys = [r.sample_id for r in stream]
    assert keys == ["niah/1K/truncation#0", "niah/1K/truncation#1", "niah/2K/truncation#0"]
    book.add_trajectory(traj(keys[1], "\\boxed{v1}", accuracy=1.0))  # the worker's accuracy of "v1"
    assert book.complete() == []
    book.add_trajectory(traj(keys[0], "no box"))
    [(cell, records)] = book.complete()
    assert cell == A and [r["index"] for r in records] == [0, 1]
    first, second = records
    assert (first["sample_id"], first["prediction"], first["sub_em"], first["error"]) == ("orig-0", None, 0.0, None)
    assert (second["sample_id"], second["prediction"], second["sub_em"], second["em"]) == ("orig-1", "v1", 1.0, 1.0)
    assert first["memory"] == ["m1", "m2"] and second["memory"] == ["m2"]  # full trace for index < traces
    assert first["truncated"] and first["doc_tokens"] == 120 and first["turns"] == 3
    assert book.unfinished() == [B]


def test_a_quarantined_last_row_completes_its_cell_at_once():
    book = CellBook(traces=0)
    stream = book.rows([A, B], lambda cell: [task_row(0), task_row(1)])
    a0, a1 = next(stream), next(stream)  # B's rows not handed out yet: A's count is already known
    book.add_trajectory(traj(a0.sample_id, "x"))
    book.add_failure(a1.sample_id, "UserError: exceeds window: 900 document tokens > 400 that fit")
    [(cell, records)] = book.complete()
    assert cell == A and records[1]["error"] == "exceeds window: 900 document tokens > 400 that fit"
    assert records[1]["sample_id"] == "orig-1" and records[1]["sub_em"] == 0.0
    assert book.unfinished() == []  # B is opened only when its rows are pulled
    next(stream)
    assert book.unfinished() == [B] and book.complete() == []


def test_a_cell_without_rows_completes_empty_and_unknown_results_are_refused():
    book = CellBook(traces=0)
    assert list(book.rows([A], lambda cell: [])) == []
    assert book.complete() == [(A, [])]
    with pytest.raises(RuntimeError, match="not running"):
        book.add_failure("niah/1K/truncation#7", "boom")


def test_saved_rows_are_skipped_and_count_towards_their_cell():
    book = CellBook(traces=0)
    saved = {A: [{"index": 1, "answer": "restored"}], B: [{"index": 0, "answer": "restored"}]}
    stream = book.rows([A, B], lambda cell: [task_row(0), task_row(1)], lambda cell: saved[cell])
    keys = [r.sample_id for r in stream]
    assert keys == ["niah/1K/truncation#0", "niah/2K/truncation#1"]
    assert book.fresh() == []  # restored records are saved already
    book.add_trajectory(traj(keys[0], "x"))
    [(cell, records)] = book.complete()
    assert cell == A and [r["index"] for r in records] == [0, 1] and records[1]["answer"] == "restored"
    assert book.fresh() == []  # a complete cell's records go to its cell file, not to a part


def test_fresh_hands_out_records_once_per_checkpoint():
    book = CellBook(traces=0)
    keys = [r.sample_id for r in book.rows([A], lambda cell: [task_row(i) for i in range(4)])]
    book.add_trajectory(traj(keys[0], "x"))
    assert book.fresh(at_least=2) == []
    book.add_trajectory(traj(keys[2], "y"))
    [(cell, records)] = book.fresh(at_least=2)
    assert cell == A and [r["index"] for r in records] == [0, 2]
    book.add_failure(keys[3], "boom")
    assert [r["index"] for r in book.fresh()[0][1]] == [3] and book.fresh() == []
    assert book.complete() == [] and book.unfinished() == [A]
