"""The training curve as a PNG: the reward and accuracy of the rollouts each step, and the held-out
sub_em wherever an evaluation landed (RL), or the loss and held-back loss (SFT)."""

from __future__ import annotations

from pathlib import Path

SERIES = {"rl": ("rollout/reward_mean", "rollout/accuracy"), "sft": ("train/loss", "train/heldout_loss")}


def plot_curve(history: list[tuple[int, dict]], path: Path, sft: bool) -> Path | None:
    """history: (step, metrics) as the steps landed. None when there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(SERIES["sft" if sft else "rl"])
    keys += sorted({k for _, m in history for k in m if k.startswith("eval/") and k.endswith("/sub_em")})
    lines = {k: [(s, m[k]) for s, m in history if k in m] for k in keys}
    lines = {k: pts for k, pts in lines.items() if pts}
    if not lines:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    for k, pts in lines.items():
        ax.plot(*zip(*pts), marker="o" if k.startswith("eval/") else None, label=k.replace("/sub_em", " (held-out)"))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("loss" if sft else "reward / accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
