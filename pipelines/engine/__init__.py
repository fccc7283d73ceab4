"""Engines behind one async interface; nothing is created at import time."""

from __future__ import annotations

from pipelines.agent.turns import Response
from pipelines.engine.base import Delta, Engine, GenRequest, Sampling
from pipelines.engine.config import EngineConfig


def create_engine(model_dir: str, cfg: EngineConfig, version: int = 0) -> Engine:
    if cfg.kind == "vllm":
        from pipelines.engine.vllm_engine import VLLMEngine

        return VLLMEngine(model_dir, cfg, version)
    if cfg.kind == "hf_batch":
        from pipelines.engine.hf_batch_engine import HFBatchEngine

        return HFBatchEngine(model_dir, cfg, version)
    from pipelines.engine.hf_engine import HFEngine

    return HFEngine(model_dir, cfg.dtype, version)


__all__ = ["Delta", "Engine", "EngineConfig", "GenRequest", "Response", "Sampling", "create_engine"]
