"""The training curve as a PNG: the reward and accuracy of the rollouts each step, and the held-out
strict score wherever an evaluation landed (RL), or the loss and held-back loss (SFT).

A run's steps are kept in OUT/history.jsonl (local or s3://), one line per step, rewritten as
each step lands, so the curve of a resumed run starts at its step 1, not at the resume."""

from __future__ import annotations

import json
from pathlib import Path

from pipelines.storage import exists, resolve, write_whole

HISTORY = "history.jsonl"

SERIES = {"rl": ("rollout/reward_mean", "rollout/accuracy"), "sft": ("train/loss", "train/heldout_loss")}


def plot_curve(history: list[tuple[int, dict]], path: Path, sft: bool) -> Path | None:
    """history: (step, metrics) as the steps landed. None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(SERIES["sft" if sft else "rl"])
    keys += sorted({k for _, m in history for k in m if k.startswith("eval/") and k.endswith("/strict")})
    lines = {k: [(s, m[k]) for s, m in history if k in m] for k in keys}
    lines = {k: pts for k, pts in lines.items() if pts}
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, pts in lines.items():
        ax.plot(*zip(*pts), marker="o" if k.startswith("eval/") else None, label=k.replace("/strict", " (held-out, strict)"))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss" if sft else "reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def load_history(out: str) -> list[tuple[int, dict]]:
    uri = f"{out.rstrip('/')}/{HISTORY}"
    if not exists(uri):
        return []
    fs, path = resolve(uri)
    with fs.open_input_stream(path) as f:
        rows = [json.loads(line) for line in f.read().decode().splitlines() if line.strip()]
    return [(r["step"], r["metrics"]) for r in rows]


def save_history(out: str, history: list[tuple[int, dict]]) -> None:
    body = "".join(json.dumps({"step": s, "metrics": m}) + "\n" for s, m in history)
    write_whole(f"{out.rstrip('/')}/{HISTORY}", body.encode())  # a kill mid-write keeps the last whole file


def merge_history(earlier: list[tuple[int, dict]], later: list[tuple[int, dict]]) -> list[tuple[int, dict]]:
    """One entry per step, by step; a step run again after a restart keeps its latest metrics."""
    by_step = dict(earlier)
    by_step.update(dict(later))
    return sorted(by_step.items())
