"""Log-probabilities of the response tokens of a packed micro-batch under an HF causal LM.

Two costs shape this: the LM head over a 49K vocabulary is a large share of a step, so it
runs only on the R rows that predict response tokens, never on all T positions; and
packed sequences must not see each other, which attention can pay for twice. The learner's
models run `packed_attention` (load_model sets it): one causal SDPA call per sequence of the
micro-batch, so the T x T block-diagonal mask is never built nor read and the blocks between
sequences are never computed. transformers' own SDPA path builds that mask from position ids
that restart at 0 (masking_utils, `find_packed_sequence_indices`) and runs the flash kernel
over all of T x T under it: with 3-5 conversations a micro-batch, attention was ~40% of a
learner step on CPU in a profile, against ~19% for causal blocks per sequence (and the step
1.16x longer in benchmarks/learner.py).
Any other attention implementation still gets that mask (checked below), and the body is
called with use_cache=False (LlamaModel makes a cache whenever use_cache is on, and packing
is detected only without one).

`autocast` runs the body's matmuls in bfloat16 over float32 weights (mixed precision: the
optimizer still updates float32 masters, so small RL updates are not rounded away). On CPUs
with AVX512-BF16 a step is ~2.5x faster. The LM head stays in float32: bf16 logits carry
~3 significant digits, an error of ~0.05 nats at typical logit sizes, as large as the
ratio deviations the clip bounds act on.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from transformers import AttentionInterface

from pipelines.learn.packing import Packed

PACKED_ATTENTION = "memagent_packed"


def packed_attention(module, query: Tensor, key: Tensor, value: Tensor, attention_mask, scaling=None,
                     dropout: float = 0.0, cu_seq_lens_q: Tensor | None = None, **kwargs) -> tuple[Tensor, None]:
    """transformers' attention interface: causal attention within each packed sequence.
    query [1, H, T, D], key/value [1, KV, T, D] (grouped heads); cu_seq_lens_q [S+1] holds the
    sequences' start offsets and T (none: one sequence). Returns [1, T, H, D]."""
    bounds = cu_seq_lens_q.tolist() if cu_seq_lens_q is not None else [0, query.shape[2]]
    parts = [F.scaled_dot_product_attention(query[:, :, a:b], key[:, :, a:b], value[:, :, a:b], is_causal=True,
                                            dropout_p=dropout, scale=scaling, enable_gqa=True)
             for a, b in zip(bounds, bounds[1:])]
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(PACKED_ATTENTION, packed_attention)


def sequence_bounds(position_ids: Tensor) -> Tensor:
    """[S+1] start offsets of the packed sequences (position ids restart at 0) and T, on the CPU."""
    pos = position_ids[0].cpu()
    starts = (pos == 0).nonzero().flatten()
    return torch.cat([starts, torch.tensor([pos.numel()])])


def packed_kwargs(model, position_ids: Tensor) -> dict:
    """What the body needs to keep packed sequences apart: their bounds for `packed_attention`, or,
    on any other attention implementation, a check that transformers builds the mask itself."""
    if getattr(model.config, "_attn_implementation", None) == PACKED_ATTENTION:
        return {"cu_seq_lens_q": sequence_bounds(position_ids)}
    _check_packing_detected(position_ids)
    return {}


def _check_packing_detected(position_ids: Tensor) -> None:
    """Fail loudly, rather than let sequences attend to each other, if transformers stops detecting packing."""
    if int((position_ids == 0).sum()) < 2:
        return
    try:
        from transformers.masking_utils import find_packed_sequence_indices
    except ImportError as e:  # an older transformers: the caller would need a mask of its own
        raise RuntimeError("this transformers does not detect packed sequences from position_ids") from e
    if find_packed_sequence_indices(position_ids) is None:
        raise RuntimeError("transformers did not detect the packed sequences in position_ids")


def response_logprobs(model, packed: Packed, temperature: float = 1.0, autocast: bool = False) -> Tensor:
    """logprob of each target under the policy at the sampling temperature: the distribution the
    behaviour logprobs came from, so the DAPO ratio compares like with like. Temperature 0
    (greedy) is treated as 1.0. Returns FloatTensor[R] (float32), differentiable."""
    device = model.lm_head.weight.device
    position_ids = packed.position_ids.to(device)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        out = model.model(input_ids=packed.input_ids.to(device), position_ids=position_ids,
                          attention_mask=None, past_key_values=None, use_cache=False,
                          **packed_kwargs(model, packed.position_ids))
    hidden = out.last_hidden_state[0].index_select(0, packed.target_positions.to(device))  # [R, H]
    logits = model.lm_head(hidden.to(model.lm_head.weight.dtype)).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, packed.target_ids.to(device).unsqueeze(-1)).squeeze(-1)
