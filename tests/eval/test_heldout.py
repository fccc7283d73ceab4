"""Held-out scoring, once (pipelines.eval.heldout): the ladder's records (the gate's and the
quickstart's scores) key and average rows as RL's in-run evaluation does."""

from __future__ import annotations

from dataclasses import replace

from pipelines.eval.heldout import record_scores, task_means
from pipelines.eval.records import Cell, RowRef, base_record, quarantine_record
from tests.learn.rows import synthetic_rows


def test_records_key_rows_by_task_and_id_and_a_quarantined_row_has_no_score():
    a1, a2, b1 = synthetic_rows(3, count=lambda text: len(text.split()))
    b1 = replace(b1, task="other", sample_id=a1.sample_id)  # the same id in another task: another row
    cell: Cell = ("synthetic", "1K", "memagent")
    records = [{**base_record(a1, "memagent", "1K", 0), "strict": 1.0}, base_record(a2, "memagent", "1K", 1),
               {**base_record(b1, "memagent", "1K", 0), "strict": 1.0},
               quarantine_record(RowRef(cell, 2, replace(a2, sample_id="r09")), "UserError: too long")]
    scores = record_scores(records)
    assert scores == {("synthetic", "r00"): 1.0, ("synthetic", "r01"): 0.0, ("other", "r00"): 1.0}
    assert task_means(scores) == ({"synthetic": 0.5, "other": 1.0}, 3)
