"""Token-budget micro-batches of conversations, packed into one row without padding.

A MemAgent batch mixes short memory turns and long chunk-reading prompts; padding them
to a common length would waste most of the compute. Packing concatenates the sequences
of a micro-batch into one row and resets position ids at each start, from which the
model's attention keeps the sequences apart (pipelines.learn.forward).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from pipelines.errors import UserError
from pipelines.learn.loss import LossAgg, lead_multipliers, token_weights


@dataclass(frozen=True)
class TrainSeq:
    """One conversation as the learner sees it (SFT: advantage 1.0, old_logprobs None)."""

    prompt_ids: list[int]
    response_ids: list[int]
    old_logprobs: list[float] | None
    advantage: float
    rollout: int

    def __len__(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


def plan_micro_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """First-fit decreasing: few micro-batches, each at most token_budget tokens, deterministic.

    Gradients are summed over micro-batches with full-batch weights, so how sequences are
    grouped changes only speed, never the step.
    """
    if lengths and max(lengths) > token_budget:
        raise UserError(f"learn.token_budget={token_budget}: below one conversation of {max(lengths)} tokens")
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        b = next((b for b, r in enumerate(room) if r >= lengths[i]), None)
        if b is None:
            bins.append([])
            room.append(token_budget)
            b = len(bins) - 1
        bins[b].append(i)
        room[b] -= lengths[i]
    return [sorted(b) for b in bins]


def plan_padded_batches(lengths: list[int], token_budget: int) -> list[list[int]]:
    """What padded batching would do (for the benchmark): sequences in arrival order, a batch
    growing while batch_size * its longest length fits the budget."""
    if lengths and max(lengths) > token_budget:
        raise UserError(f"learn.token_budget={token_budget}: below one conversation of {max(lengths)} tokens")
    batches: list[list[int]] = []
    longest = 0
    for i, n in enumerate(lengths):
        if batches and (len(batches[-1]) + 1) * max(longest, n) <= token_budget:
            batches[-1].append(i)
            longest = max(longest, n)
        else:
            batches.append([i])
            longest = n
    return batches


def padding_fraction(lengths: list[int], plan: list[list[int]], padded: bool = False) -> float:
    """Share of computed tokens that are padding: 0 when packed; padded: each batch computes
    batch_size * its longest sequence."""
    if not padded:
        return 0.0
    real = sum(lengths[i] for b in plan for i in b)
    computed = sum(len(b) * max(lengths[i] for i in b) for b in plan if b)
    return (computed - real) / computed if computed else 0.0


@dataclass
class Packed:
    """One micro-batch: a single row of T tokens and the R response tokens that carry loss.

    Per-target tensors (R-shaped) line up with response_logprobs(model, packed). seq_index is
    the index in the full batch `seqs` given to pack; weights are the full-batch loss weights
    of these targets (their sum over all micro-batches of the batch is 1).
    """

    input_ids: Tensor  # LongTensor[1, T]
    position_ids: Tensor  # LongTensor[1, T], 0 at each sequence start
    target_positions: Tensor  # LongTensor[R]: the position whose logit predicts the target
    target_ids: Tensor  # LongTensor[R]
    seq_index: Tensor  # LongTensor[R]
    old_logprobs: Tensor  # FloatTensor[R], zeros where a sequence has none
    advantages: Tensor  # FloatTensor[R]
    rollout_ids: Tensor  # LongTensor[R]
    weights: Tensor  # FloatTensor[R]

    @property
    def num_tokens(self) -> int:
        return self.input_ids.shape[1]

    def to(self, device: torch.device) -> Packed:
        """The same micro-batch on `device` (itself where it is there already)."""
        return Packed(*(getattr(self, f.name).to(device) for f in fields(self)))

    @property
    def mask(self) -> Tensor:
        """All targets carry loss: the mask the loss functions take in the packed layout."""
        return torch.ones_like(self.target_ids, dtype=torch.bool)


def batch_weights(seqs: list[TrainSeq], loss_agg: LossAgg = "token_mean",
                  lead: tuple[int, float] | None = None) -> Tensor:
    """The per-token loss weight of each sequence, over the whole batch (a token of weight 1:
    with `lead`, a response's first tokens weigh more, lead_multipliers)."""
    n = torch.tensor([sum(lead_multipliers(len(s.response_ids), lead)) for s in seqs], dtype=torch.double)
    return token_weights(n, torch.tensor([s.rollout for s in seqs], dtype=torch.long), loss_agg)


def pack(seqs: list[TrainSeq], indices: list[int], loss_agg: LossAgg = "token_mean",
         seq_weights: Tensor | None = None, lead: tuple[int, float] | None = None) -> Packed:
    """Concatenate seqs[indices] into one row; weights count the whole of `seqs` (pass
    seq_weights = batch_weights(seqs, loss_agg, lead) to compute them once per batch); lead:
    learn.sft_lead (the first tokens of each response weigh more)."""
    w_seq = batch_weights(seqs, loss_agg, lead) if seq_weights is None else seq_weights
    ids, pos, tpos, tids, sidx, old, adv, rid, w = [], [], [], [], [], [], [], [], []
    for i in indices:
        s = seqs[i]
        if not s.prompt_ids:
            raise ValueError(f"sequence {i}: empty prompt, so no logit predicts its first response token")
        if s.old_logprobs is not None and len(s.old_logprobs) != len(s.response_ids):
            raise ValueError(f"sequence {i}: {len(s.old_logprobs)} old logprobs for {len(s.response_ids)} tokens")
        start, r = len(ids) + len(s.prompt_ids) - 1, len(s.response_ids)
        ids += s.prompt_ids + s.response_ids
        pos += range(len(s))
        tpos += range(start, start + r)
        tids += s.response_ids
        sidx += [i] * r
        old += s.old_logprobs if s.old_logprobs is not None else [0.0] * r
        adv += [s.advantage] * r
        rid += [s.rollout] * r
        w += [float(w_seq[i]) * m for m in lead_multipliers(r, lead)]
    long = dict(dtype=torch.long)
    return Packed(torch.tensor([ids], **long), torch.tensor([pos], **long), torch.tensor(tpos, **long),
                  torch.tensor(tids, **long), torch.tensor(sidx, **long), torch.tensor(old, dtype=torch.float32),
                  torch.tensor(adv, dtype=torch.float32), torch.tensor(rid, **long),
                  torch.tensor(w, dtype=torch.float32))
