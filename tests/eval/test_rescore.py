"""Committed cells scored again from their stored predictions: a cell written before the strict
score gets it, and its folder's summary and table lead with it; its gate rates stay."""

import json

from pipelines.eval.rescore import eval_folders, rescore
from pipelines.eval.results import read_cell, write_cell


def test_an_old_folder_is_rescored_strict_first(tmp_path):
    folder = tmp_path / "rl" / "memagent-4K-n2"
    cell = folder / "cells" / "niah_single" / "4K" / "memagent.parquet"
    old = [{"sample_id": "a", "task": "niah_single", "answers": ["8624779"], "prediction": "8", "em": 0.0,
            "sub_em": 1.0, "f1": 0.0, "answer_recall": 1.0, "error": None, "n_turns": 3,
            "chunks_read": 3, "chunks_unread": 1, "memory_updates": 2, "malformed": 0},
           {"sample_id": "b", "task": "niah_single", "answers": ["1234567"], "prediction": "1234567", "em": 1.0,
            "sub_em": 1.0, "f1": 1.0, "answer_recall": 1.0, "error": None, "n_turns": 3,
            "chunks_read": 4, "chunks_unread": 0, "memory_updates": 1, "malformed": 0}]
    write_cell(old, str(cell))
    assert eval_folders(tmp_path) == [folder]
    summary = rescore(folder)[("niah_single", "4K", "memagent")]
    assert (summary["strict"], summary["sub_em"], summary["n"]) == (0.5, 1.0, 2)
    assert [r["strict"] for r in read_cell(str(cell))] == [0.0, 1.0]
    stored = json.loads((folder / "summary.json").read_text())
    assert stored["metrics"]["eval/niah_single/4K/strict"] == 0.5
    assert stored["table"]["niah_single"]["4K"]["memagent"]["sub_em"] == 1.0
    assert stored["metrics"]["gate/niah_single/4K/update_rate"] == 3 / 7
    assert stored["metrics"]["gate/niah_single/4K/exit_fraction"] == 1 / 8
    assert (folder / "table.md").read_text().startswith("### niah_single: strict % [95% interval] (sub_em (paper's")
