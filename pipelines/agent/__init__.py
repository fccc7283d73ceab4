"""The memory-agent core: templates, chunking, the sans-IO loop, verifiers. No Ray, no engine."""

from pipelines.agent.loop import AgentLoop, AgentResult, TurnRequest
from pipelines.agent.templates import TemplateSet, get_templates

__all__ = ["AgentLoop", "AgentResult", "TurnRequest", "TemplateSet", "get_templates"]
