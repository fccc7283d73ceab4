"""One replica's core with a real engine (transformers, the tiny random model), no Ray."""

import asyncio

from pipelines.agent import AgentConfig
from pipelines.engine import EngineConfig
from pipelines.serve.config import ServeConfig
from pipelines.serve.replica import AgentCore, ReplicaSettings
from pipelines.serve.state import write_model_state

ENGINE = EngineConfig(kind="hf", dtype="float32", max_model_len=1024)
AGENT = AgentConfig(chunk_size=64, memory_budget=8, final_budget=8)


def test_a_replica_that_missed_a_reload_serves_the_recorded_version_first(tiny_model_dir, home, tmp_path):
    """A replica that finished starting after a reload's broadcast must not answer with the old weights."""
    state = str(tmp_path / "state")
    settings = ReplicaSettings(model=str(tiny_model_dir), home=str(home), state_dir=state,
                               engine=ENGINE, agent=AGENT, serve=ServeConfig())

    async def scenario() -> tuple[dict, dict, dict]:
        core = AgentCore.create(settings)  # no reload recorded yet: the configured model, version 0
        try:
            started = core.info()
            write_model_state(state, str(tiny_model_dir), 3)  # a reload whose broadcast missed this replica
            out = await core.answer({"question": "What is it?", "document": "The sky is blue. " * 20})
            assert out.error is None, out
            return started, out.body, core.info()
        finally:
            await core.close()

    started, out, after = asyncio.run(scenario())
    assert started["version"] == 0
    assert "error" not in out, out
    assert out["model_version"] == 3 and after["version"] == 3 and out["turns"] >= 2
