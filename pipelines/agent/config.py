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
    template: str = "release"
    chunk_size: int = Field(5000, gt=0)
    memory_budget: int = Field(1024, gt=0)
    final_budget: int = Field(1024, gt=0)
    question_budget: int = Field(1024, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int = 0
    # Gated memory (pipelines.agent.gates): a memory turn may keep the memory or end the reading.
    # Off: the released checkpoints' loop and prompts, byte for byte. On: template "gated".
    gates: bool = False

    @model_validator(mode="after")
    def _gates_match_template(self) -> AgentConfig:
        check_gates(self.gates, self.template)
        return self
