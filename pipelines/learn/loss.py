"""Multi-Conv DAPO: the RL objective of MemAgent, and the SFT loss of its warm start (pure torch).

Every function takes per-token tensors of any shape [..., L] with a response mask of that
shape, so both the padded layout [num_conversations, max_len] and the packed layout [R]
(pipelines.learn.packing) go through the same code.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Literal

import torch
from torch import Tensor

LossAgg = Literal["token_mean", "rollout_mean"]


def group_values(group_ids: Sequence[Hashable] | Tensor) -> list[Hashable]:
    """Group ids as values: a list (or tuple) of hashables, or a 1-D tensor. Anything else is refused:
    a tensor's elements hash by identity, so ids left as tensors would make every rollout its own
    group and every advantage 0, silently."""
    if isinstance(group_ids, Tensor):
        if group_ids.ndim != 1:
            raise TypeError(f"group_ids: a tensor of shape {tuple(group_ids.shape)}; expected a list or a 1-D tensor")
        return group_ids.tolist()
    if not isinstance(group_ids, (list, tuple)):
        raise TypeError(f"group_ids: a {type(group_ids).__name__}; expected a list or a 1-D tensor")
    if any(isinstance(g, Tensor) for g in group_ids):
        raise TypeError("group_ids: a list holding tensors (they hash by identity); pass values or one 1-D tensor")
    return list(group_ids)


def group_advantages(rewards: Tensor, group_ids: Sequence[Hashable] | Tensor, norm_std: bool = False) -> Tensor:
    """Each rollout's reward minus its group's mean: the baseline GRPO gets without a critic.

    Dr.GRPO drops GRPO's division by the group std: it up-weights groups that are nearly
    all right or all wrong and biases the objective. `norm_std=True` restores it with the
    population std (unbiased=False), so a group of one has std 0 and advantage 0, never NaN.
    """
    group_ids = group_values(group_ids)
    if rewards.ndim != 1 or len(group_ids) != rewards.shape[0]:
        raise ValueError(f"rewards {tuple(rewards.shape)} and {len(group_ids)} group ids do not match")
    index: dict[Hashable, int] = {}
    group = torch.tensor([index.setdefault(g, len(index)) for g in group_ids], dtype=torch.long)
    r = rewards.double()
    count = torch.zeros(len(index), dtype=torch.double).index_add_(0, group, torch.ones_like(r))
    mean = torch.zeros(len(index), dtype=torch.double).index_add_(0, group, r) / count
    adv = r - mean[group]
    if norm_std:
        var = torch.zeros(len(index), dtype=torch.double).index_add_(0, group, adv**2) / count
        adv = adv / (var.sqrt()[group] + 1e-6)
    return adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32)


def token_weights(num_tokens: Tensor, rollout_ids: Tensor | None, loss_agg: LossAgg) -> Tensor:
    """The loss weight of each token of each row, from each row's masked-token count.

    token_mean (the paper's): every response token of the batch weighs the same, so a
    rollout that read more chunks (more conversations) counts more. rollout_mean: every
    rollout weighs 1/n_rollouts, split evenly over its tokens, whatever its length; a rollout
    with no masked token is not counted, so the weights of the batch still sum to 1.
    """
    num_tokens = num_tokens.double()
    if loss_agg == "token_mean":
        return torch.full_like(num_tokens, 1.0 / max(float(num_tokens.sum()), 1.0))
    if loss_agg != "rollout_mean":
        raise ValueError(f"loss_agg={loss_agg!r}: expected token_mean or rollout_mean")
    if rollout_ids is None or rollout_ids.shape != num_tokens.shape:
        raise ValueError("loss_agg=rollout_mean needs one rollout id per row")
    _, rollout = torch.unique(rollout_ids, return_inverse=True)
    per_rollout = torch.zeros(int(rollout.max()) + 1 if rollout.numel() else 0, dtype=torch.double)
    per_rollout.index_add_(0, rollout, num_tokens)
    n_rollouts = max(int((per_rollout > 0).sum()), 1)
    return 1.0 / (n_rollouts * per_rollout[rollout].clamp(min=1.0))


def lead_multipliers(n: int, lead: tuple[int, float] | None) -> list[float]:
    """Per-token loss multipliers of a response of n tokens: its first lead[0] tokens weigh lead[1]
    times the rest (learn.sft_lead); None: all 1."""
    if lead is None:
        return [1.0] * n
    k, w = lead
    return [float(w)] * min(k, n) + [1.0] * max(n - k, 0)


def loss_weights(mask: Tensor, rollout_ids: Tensor | None, loss_agg: LossAgg) -> Tensor:
    """Per-token weights over the whole batch (sum 1). Compute them once on the full batch and
    slice them per micro-batch: the micro-batch losses then sum to the full-batch loss.

    rollout_ids: one per row (shape mask.shape[:-1]) or one per token (shape mask.shape).
    """
    m = mask.bool()
    if rollout_ids is not None and rollout_ids.shape == mask.shape:
        # one id per token (the packed layout): each token is a row of one token
        w = token_weights(m.reshape(-1).double(), rollout_ids.reshape(-1), loss_agg).reshape(mask.shape)
    else:
        ids = None if rollout_ids is None else rollout_ids.reshape(-1)
        w = token_weights(m.double().sum(-1).reshape(-1), ids, loss_agg).reshape(mask.shape[:-1]).unsqueeze(-1)
    return torch.where(m, w, 0.0).float()


def _broadcast_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """One advantage per conversation row (the Multi-Conv broadcast) or one per token."""
    if advantages.shape == mask.shape:
        return advantages.float()
    if advantages.shape == mask.shape[:-1]:
        return advantages.float().unsqueeze(-1).expand(mask.shape)
    raise ValueError(f"advantages {tuple(advantages.shape)} fit neither mask {tuple(mask.shape)} nor its rows")


def _masked_mean(x: Tensor, m: Tensor) -> float:
    return float(torch.where(m, x, 0.0).sum() / m.sum().clamp(min=1))


def tis_weights(old_logprobs: Tensor, behaviour_logprobs: Tensor, mask: Tensor, cap: float) -> tuple[Tensor, Tensor]:
    """Truncated importance sampling: min(pi_old / mu, cap) per token, and where the cap bit.

    mu is what the engine sampled from (vLLM's kernels, bf16), pi_old the learner's own
    probability of the same token; their ratio corrects the gradient toward the learner's
    policy, and the cap bounds the variance of the rare tokens the engine over-sampled.
    Detached: a weight on the gradient, never differentiated. 0 at masked positions."""
    m = mask.bool()
    raw = torch.exp(torch.where(m, old_logprobs.detach().float() - behaviour_logprobs.float(), 0.0))
    return torch.where(m, raw.clamp(max=cap), 0.0), m & (raw > cap)


def multi_conv_dapo_loss(logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, mask: Tensor, *,
                         eps_low: float = 0.2, eps_high: float = 0.28, ref_logprobs: Tensor | None = None,
                         kl_coef: float = 0.0, loss_agg: LossAgg = "token_mean", rollout_ids: Tensor | None = None,
                         weights: Tensor | None = None, behaviour_logprobs: Tensor | None = None,
                         tis_cap: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """The clipped surrogate over every response token of every conversation of every rollout.

    Each conversation of a rollout carries the rollout's advantage (its memory turns earn the
    final answer's reward). DAPO decouples the clip: eps_high > eps_low lets unlikely tokens
    with positive advantage grow further before the clip stops them ("clip-higher"), which
    keeps entropy from collapsing; the lower bound stays PPO's.

    tis_cap: each token's surrogate times min(exp(old - behaviour), tis_cap) (`tis_weights`),
    where old_logprobs are the learner's and behaviour_logprobs the engine's; None: no weight.
    """
    m = mask.bool()
    # torch.where, not multiplication: garbage (inf, NaN) at masked positions never reaches exp
    lp = torch.where(m, logprobs.float(), 0.0)
    old = torch.where(m, old_logprobs.float(), 0.0)
    adv = torch.where(m, _broadcast_advantages(advantages, mask), 0.0)
    w = loss_weights(mask, rollout_ids, loss_agg) if weights is None else torch.where(m, weights.float(), 0.0)
    ratio = torch.exp(lp - old)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - eps_low, 1 + eps_high) * adv)
    tis = None
    if tis_cap is not None:
        if behaviour_logprobs is None:
            raise ValueError("tis_cap needs behaviour_logprobs (the engine's)")
        tis = tis_weights(old_logprobs, behaviour_logprobs, mask, tis_cap)
        surrogate = tis[0] * surrogate
    loss = -(w * surrogate).sum()
    kl = torch.zeros_like(lp)
    if ref_logprobs is not None:
        # k3 = exp(ref - logp) - (ref - logp) - 1: unbiased for KL(pi || ref), always >= 0, low variance
        delta = torch.where(m, ref_logprobs.float(), 0.0) - lp
        kl = torch.exp(delta) - delta - 1
        loss = loss + kl_coef * (w * kl).sum()
    with torch.no_grad():
        metrics = {
            "clip_low": _masked_mean(((ratio < 1 - eps_low) & (adv < 0)).float(), m),
            "clip_high": _masked_mean(((ratio > 1 + eps_high) & (adv > 0)).float(), m),
            "ratio_mean": _masked_mean(ratio, m),
            "kl": _masked_mean(kl, m),
            "tokens": float(m.sum()),
        }
        if tis is not None:
            metrics["tis_weight"] = _masked_mean(tis[0], m)
            metrics["tis_clipped"] = _masked_mean(tis[1].float(), m)
    return loss, metrics


def sft_loss(logprobs: Tensor, mask: Tensor, weights: Tensor | None = None) -> tuple[Tensor, dict[str, float]]:
    """Negative log-likelihood of the response tokens, token-mean (same weights convention)."""
    m = mask.bool()
    lp = torch.where(m, logprobs.float(), 0.0)
    w = loss_weights(mask, None, "token_mean") if weights is None else torch.where(m, weights.float(), 0.0)
    loss = -(w * lp).sum()
    with torch.no_grad():
        metrics = {"nll": -_masked_mean(lp, m), "tokens": float(m.sum())}
    return loss, metrics
