"""LoRA adapters on a model's linear layers, merged back into plain weights for every save.

A small in-house version (a frozen base weight plus B @ A scaled by alpha / rank) so that
published policies stay ordinary HF folders that vLLM loads without adapter support.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from pipelines.errors import UserError
from pipelines.learn.config import LoraConfig


class LoraLinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, dtype=base.weight.dtype))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, dtype=base.weight.dtype))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))
        self.scale = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_a.T @ self.lora_b.T) * self.scale


def add_lora(model: nn.Module, cfg: LoraConfig) -> int:
    """Replace every targeted nn.Linear (by attribute name) with a LoraLinear; returns how many."""
    for p in model.parameters():
        p.requires_grad_(False)
    n = 0
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if name in cfg.targets and isinstance(child, nn.Linear):
                setattr(module, name, LoraLinear(child, cfg.rank, cfg.alpha))
                n += 1
    if n == 0:
        raise UserError(f"learn.lora.targets {list(cfg.targets)}: no such linear layers in the model")
    return n


def merged_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """The model's weights under their original names, adapters merged in."""
    scales = {m.scale for m in model.modules() if isinstance(m, LoraLinear)}
    return merge_lora(model.state_dict(), scales.pop()) if scales else dict(model.state_dict())


def merge_lora(state: dict[str, torch.Tensor], scale: float) -> dict[str, torch.Tensor]:
    """A state dict with LoRA layers (X.base.weight, X.lora_a, X.lora_b) as plain weights
    (X.weight = base + scale * B @ A); scale: alpha / rank."""
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if key.endswith(".base.weight"):
            owner = key.removesuffix(".base.weight")
            out[f"{owner}.weight"] = (value + (state[f"{owner}.lora_b"] @ state[f"{owner}.lora_a"]) * scale).detach()
        elif key.endswith(".base.bias"):
            out[key.removesuffix(".base.bias") + ".bias"] = value
        elif not key.endswith((".lora_a", ".lora_b")):
            out[key] = value
    return out
