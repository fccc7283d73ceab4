"""The memory-agent core: config, templates, chunking, the sans-IO loops and their records,
verifiers. No Ray, no engine."""

from pipelines.agent.config import AgentConfig, Method
from pipelines.agent.factory import make_loop
from pipelines.agent.loop import AgentLoop
from pipelines.agent.templates import TemplateSet, get_templates
from pipelines.agent.turns import AgentResult, Loop, Response, TurnRecord, TurnRequest

__all__ = ["AgentConfig", "AgentLoop", "AgentResult", "Loop", "Method", "Response", "TemplateSet",
           "TurnRecord", "TurnRequest", "get_templates", "make_loop"]
