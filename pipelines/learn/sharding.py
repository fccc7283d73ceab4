"""FSDP2 (`learn.strategy: fsdp2`): parameters, gradients and optimizer state sharded over the
ranks, for models whose full training state does not fit one device (the paper's 7B on
80 GB GPUs). One FSDP unit per decoder layer, and the root unit (embeddings, final norm, LM
head: tied in SmolLM2 and Qwen2.5-small, so they must share a unit) around them.

What changes against data parallel (DDP, the default):
- Every forward all-gathers each layer's shards, so every rank must run the same number of
  micro-batch passes in a step: ranks agree on the largest count (`agreed_passes`), and a
  rank short of it runs an empty pass (a real forward whose loss is multiplied by 0).
- Gradients are reduce-scattered (averaged) by FSDP itself; RL wants them summed (each rank's
  loss already carries whole-batch weights), so its losses are scaled by the world size
  first; SFT keeps the average, as `trainer.grad_sync` does for DDP.
- The forward goes through the root module (`model(..., logits_to_keep=target positions)`,
  so the LM head still runs only where a response token is predicted), because calling the
  body alone would skip the root unit's all-gather.
- Mixed precision is FSDP's own: the layers compute in bfloat16 over float32 shards, the
  root (norm and LM head) stays float32, as `forward.py` does with autocast for DDP.
- Saving gathers the full weights on rank 0 (`full_state`): every rank must call it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import Tensor, nn

from pipelines.learn.forward import packed_kwargs
from pipelines.learn.packing import Packed


def shard(model: nn.Module, bf16: bool, device: torch.device | str = "cpu") -> None:
    """Wrap `model` in place: a unit per decoder layer, then the root, its shards moved to
    `device` (a mesh of that device type over the ranks: cuda with NCCL, cpu with gloo). FSDP
    averages gradients over ranks; a summed gradient is that average times the world size
    (`loss_scale`): a custom divide factor would need PREMUL_SUM, which gloo lacks."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    layer_mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else None
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh, **({"mp_policy": layer_mp} if layer_mp else {}))
    fully_shard(model, mesh=mesh)


def loss_scale(grads: str) -> float:
    """What each rank's loss is multiplied by before backward: 'sum' -> world size, 'mean' -> 1."""
    return float(dist.get_world_size()) if grads == "sum" else 1.0


def agreed_passes(n: int, device: torch.device | str = "cpu") -> int:
    """The largest number of micro-batch passes any rank has this step (NCCL reduces cuda tensors only)."""
    t = torch.tensor([n], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def response_logprobs(model, packed: Packed, temperature: float = 1.0) -> Tensor:
    """As forward.response_logprobs, through the sharded root module. FloatTensor[R]."""
    device = packed.input_ids.device
    out = model(input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None,
                past_key_values=None, use_cache=False, logits_to_keep=packed.target_positions.to(device),
                **packed_kwargs(model, packed.position_ids))
    logits = out.logits[0].float()
    if temperature > 0 and temperature != 1.0:
        logits = logits / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, packed.target_ids.unsqueeze(-1)).squeeze(-1)


def full_state(model: nn.Module, opt=None, trainable_only: bool = False) -> tuple[dict, dict]:
    """(model state, optimizer state), gathered whole on rank 0 (other ranks get empty dicts).
    Collective: every rank calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=trainable_only)
    weights = get_model_state_dict(model, options=options)
    optim = get_optimizer_state_dict(model, opt, options=options) if opt is not None else {}
    return weights, optim


def load_full_state(model: nn.Module, opt, weights: dict, optim: dict) -> None:
    """Every rank passes the same full state (each read the checkpoint); its shards are kept."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict

    options = StateDictOptions(full_state_dict=True, strict=False)
    set_model_state_dict(model, weights, options=options)
    set_optimizer_state_dict(model, opt, optim, options=options)


def full_norm(total: Tensor) -> float:
    """clip_grad_norm_'s result over sharded gradients is a DTensor: its global value."""
    return float(total.full_tensor() if hasattr(total, "full_tensor") else total)
