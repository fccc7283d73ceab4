"""Score an evaluation folder's finished cells again from their stored predictions (no model is
run): every test score (pipelines.agent.reward.SCORES) computed anew, the cells rewritten with
them, and the folder's summary.json, table.md and table.csv (and its plot, if it has one)
rebuilt as the ladder writes them, strict score first.

    .venv/bin/python -m pipelines.eval.rescore benchmarks/results/eval_ladder

Folders: every folder at or under the given ones that holds a `cells/` folder. What the scorer
changes reaches committed results this way, e.g. the strict score added to cells scored only
by the paper's lenient sub_em.
"""

from __future__ import annotations

import sys
from pathlib import Path

from pipelines.errors import UserError
from pipelines.eval.ladder import summary_files
from pipelines.eval.report import LABELS, Summary, plot
from pipelines.eval.results import read_cell, rescored, write_cell
from pipelines.eval.stats import parse_length


def eval_folders(root: Path) -> list[Path]:
    if not root.is_dir():
        raise UserError(f"results '{root}': not a folder")
    return sorted({cells.parent for cells in root.rglob("cells") if cells.is_dir()})


def rescore(folder: Path) -> Summary:
    """The folder's cells rewritten with fresh scores, then its summary files; returns the summaries."""
    cells = {}
    for path in sorted((folder / "cells").glob("*/*/*.parquet")):
        records = [rescored(r) for r in read_cell(str(path))]
        write_cell(records, str(path))
        cells[(path.parent.parent.name, path.parent.name, path.stem)] = records
    tasks = sorted({k[0] for k in cells})
    lengths = sorted({k[1] for k in cells}, key=parse_length)
    methods = sorted({k[2] for k in cells}, key=lambda m: (list(LABELS).index(m) if m in LABELS else len(LABELS), m))
    summary, _, files = summary_files(cells, tasks, lengths, methods)
    for name, text in files.items():
        (folder / name).write_text(text)
    if (folder / "accuracy_vs_length.png").exists():
        plot(summary, tasks, lengths, methods, folder / "accuracy_vs_length.png")
    return summary


def main(argv: list[str]) -> None:
    for root in map(Path, argv):
        for folder in eval_folders(root):
            cells = rescore(folder)
            print(f"rescored {len(cells)} cell(s) in {folder}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except UserError as e:
        sys.exit(f"rescore: {e}")
