"""Log-probabilities of the response tokens of a packed micro-batch under an HF causal LM.

Two costs shape this: the LM head over a 49K vocabulary is a large share of a step, so it
runs only on the R rows that predict response tokens, never on all T positions; and
packed sequences must not see each other. transformers (masking_utils,
`find_packed_sequence_indices`) builds the block-diagonal causal mask from position ids
that restart at 0, but only when attention_mask is None and there is no KV cache, and
LlamaModel creates a cache whenever use_cache is on (config.use_cache is True by default):
so the body is called with use_cache=False. Flash-attention builds use the same position ids
for their varlen kernels, so no T x T mask of our own is needed on any attention backend.

`autocast` runs the body's matmuls in bfloat16 over float32 weights (mixed precision: the
optimizer still updates float32 masters, so small RL updates are not rounded away). On CPUs
with AVX512-BF16 a step is ~2.5x faster. The LM head stays in float32: bf16 logits carry
~3 significant digits, an error of ~0.05 nats at typical logit sizes, as large as the
ratio deviations the clip bounds act on.
"""

from __future__ import annotations

import torch
from torch import Tensor

from pipelines.learn.packing import Packed


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
    _check_packing_detected(position_ids)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
        out = model.model(input_ids=packed.input_ids.to(device), position_ids=position_ids,
                          attention_mask=None, past_key_values=None, use_cache=False)
    hidden = out.last_hidden_state[0].index_select(0, packed.target_positions.to(device))  # [R, H]
    logits = model.lm_head(hidden.to(model.lm_head.weight.dtype)).float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    logp = torch.log_softmax(logits, dim=-1)
    return logp.gather(-1, packed.target_ids.to(device).unsqueeze(-1)).squeeze(-1)
