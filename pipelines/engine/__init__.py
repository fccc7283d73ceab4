"""Engines behind one async interface; nothing is created at import time."""

from __future__ import annotations

from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, Engine, GenRequest, Sampling
from pipelines.engine.config import EngineConfig
from pipelines.errors import UserError


def create_engine(model_dir: str, cfg: EngineConfig, version: int = 0) -> Engine:
    if cfg.kind == "vllm":
        from pipelines.engine.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, cfg, version)
    if cfg.kind == "echo":
        from pipelines.engine.echo_engine import EchoEngine

        return EchoEngine(model_dir, version)
    if cfg.kind == "hf_batch":
        from pipelines.engine.hf_batch_engine import HFBatchEngine

        return HFBatchEngine(model_dir, cfg, version)
    from pipelines.engine.hf_engine import HFEngine

    return HFEngine(model_dir, cfg.compute_dtype(), version)


def refuse_stand_in(cfg: EngineConfig, command: str) -> None:
    """serve and train need a model's answers; the echo engine only stands in for one in benchmarks."""
    if cfg.kind == "echo":
        raise UserError(f"engine.kind=echo: a stand-in for plumbing benchmarks; `memagent {command}` needs a model "
                        "engine (vllm, hf or hf_batch)")


__all__ = ["Delta", "Engine", "EngineConfig", "GenRequest", "Response", "Sampling", "create_engine", "refuse_stand_in"]
