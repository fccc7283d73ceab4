"""The `agent:` config section and the loop methods. The agent owns them: nothing here imports
the rest of the project, so any stage can depend on the agent without a cycle."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pipelines.agent.templates import check_gates
from pipelines.typed import Strict

# memagent: the memory loop; truncation / full: the one-turn baselines of the evaluation ladder.
Method = Literal["memagent", "truncation", "full"]


class AgentConfig(Strict):
    """Defaults: the budgets SmolLM2-135M-Instruct is trained with here (the embedded recipe); the
    paper's 8K-window budgets (chunk 5000, memory 1024, answer 1024) are the cluster preset's."""

    template: str = "release"
    chunk_size: int = Field(256, gt=0)  # small chunks: 2-4 turns per training document of 512-1024 tokens
    memory_budget: int = Field(64, gt=0)  # room for a few needle sentences (~20 tokens each)
    final_budget: int = Field(32, gt=0)  # a boxed 7-digit value takes ~12 tokens
    question_budget: int = Field(1024, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    # Gated memory (pipelines.agent.gates): a memory turn may keep the memory or end the reading.
    # Off: the released checkpoints' loop and prompts, byte for byte. On: template "gated".
    gates: bool = False
    # Grounded memory (pipelines.agent.grounding): drop the sentences of a memory write that state a
    # number its turn did not read. Off: the memory is the model's text, as the paper's loop.
    grounded: bool = False

    @model_validator(mode="after")
    def _gates_match_template(self) -> AgentConfig:
        check_gates(self.gates, self.template)
        return self
