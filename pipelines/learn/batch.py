"""Rollout groups -> the learner's conversations. Pure.

Multi-Conv credit assignment (MEMAGENT.md): every conversation of a rollout (its memory
turns and its final turn) carries that rollout's one advantage, R_i - mean of its group.
"""

from __future__ import annotations

import torch

from pipelines.learn.loss import group_advantages
from pipelines.learn.packing import TrainSeq
from pipelines.rollout.trajectory import Group


def rl_batch(groups: list[Group], version: int, norm_std: bool = False) -> tuple[list[TrainSeq], list[bool]]:
    """(conversations, fresh): fresh[i] is true when conversation i was generated entirely by
    policy `version` (the learner's current weights)."""
    trajs = [(g.group_id, t) for g in groups for t in g.trajectories]
    if not trajs:
        return [], []
    rewards = torch.tensor([t.reward for _, t in trajs], dtype=torch.float64)
    adv = group_advantages(rewards, [gid for gid, _ in trajs], norm_std)
    seqs, fresh = [], []
    for r, ((_, t), a) in enumerate(zip(trajs, adv.tolist())):
        for turn in t.turns:
            if turn.response_ids:
                seqs.append(TrainSeq(turn.prompt_ids, turn.response_ids, turn.logprobs, a, r))
                fresh.append(turn.version == turn.version_end == version)
    return seqs, fresh
