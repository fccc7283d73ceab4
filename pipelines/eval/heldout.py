"""Held-out scoring, once: the strict score of each held-out row, and its per-task means.

Three places score a model on held-out rows: RL's in-run evaluation (the rollout hub, every
learn.eval_every steps, on the training's own workers and without files), and the gate of
continuous training and the quickstart's choice between SFT and SFT + RL (through the ladder,
whose cells on disk make a re-run skip what is done). All of them key a row's score the same
way, (task, sample_id), so two models scored on the same rows pair up row by row
(eval.stats.paired_diff), and all average a task's rows the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

RowKey = tuple[str, str]  # (task, sample_id)


def score_rows(cfg: Any, rows: list, workers: list) -> dict[RowKey, float]:
    """The strict score of each row, run once on `workers` with the agent's sampling (greedy
    by default); a row the workers quarantine has no score."""
    from pipelines.agent.reward import strict_score
    from pipelines.rollout.core import RolloutSpec
    from pipelines.rollout.service import run_groups

    a = cfg.agent
    by_id = {r.sample_id: r for r in rows}
    out: dict[RowKey, float] = {}
    for item in run_groups(cfg, rows, RolloutSpec(a.temperature, a.top_p, seed=a.seed), workers=workers):
        for t in getattr(item, "trajectories", []):
            row = by_id[t.sample_id]
            out[(row.task, row.sample_id)] = strict_score(t.prediction, row.answers, row.answer_kind)
    return out


def record_scores(records: Iterable[dict]) -> dict[RowKey, float]:
    """The strict score of each ladder record (pipelines.eval.records) that ran: what
    score_rows gives for the same rows."""
    return {(r["task"], r["sample_id"]): float(r["strict"]) for r in records if r.get("error") is None}


def task_means(scores: dict[RowKey, float]) -> tuple[dict[str, float], int]:
    """({task: mean strict score}, rows scored)."""
    by_task: dict[str, list[float]] = {}
    for (task, _), v in scores.items():
        by_task.setdefault(task, []).append(v)
    return {t: sum(v) / len(v) for t, v in by_task.items()}, len(scores)


def task_scores(cfg: Any, rows: list, workers: list) -> tuple[dict[str, float], int]:
    """score_rows' per-task means and the rows scored: RL's in-run evaluation (the rollout
    hub is handed this function: rollout/ does not import eval/, which imports it)."""
    return task_means(score_rows(cfg, rows, workers))
