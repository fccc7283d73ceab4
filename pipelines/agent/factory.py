"""The one way to build a loop: by method name, from the agent config."""

from __future__ import annotations

from collections.abc import Iterable

from pipelines.agent.codec import ChatCodec
from pipelines.agent.config import AgentConfig, Method
from pipelines.agent.direct import DirectLoop
from pipelines.agent.loop import AgentLoop, LoopLimits
from pipelines.agent.templates import get_templates
from pipelines.agent.turns import Loop


def limits_of(cfg: AgentConfig) -> LoopLimits:
    return LoopLimits(cfg.memory_budget, cfg.final_budget, cfg.question_budget)


def make_loop(question: str, chunks: Iterable[list[int]], codec: ChatCodec, cfg: AgentConfig,
              method: Method = "memagent", window: int = 0, keep_ids: bool = False) -> Loop:
    """memagent: the memory loop; truncation / full: one turn in `window` tokens (prompt + answer)."""
    if method == "memagent":
        return AgentLoop(question, chunks, codec, get_templates(cfg.template), limits_of(cfg), keep_ids,
                         cfg.grounded)
    return DirectLoop(question, chunks, codec, window, cfg.final_budget, full=method == "full", keep_ids=keep_ids)
