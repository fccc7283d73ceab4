"""engine.kind=echo: the plumbing benchmarks' stand-in runs the real agent loop to a boxed
answer, and the commands whose output must come from a model refuse it in one line."""

import asyncio

import pytest

from pipelines.agent import AgentConfig
from pipelines.agent.chunking import iter_chunks, n_turns
from pipelines.agent.codec import ChatCodec
from pipelines.agent.factory import make_loop
from pipelines.engine import EngineConfig, create_engine, refuse_stand_in
from pipelines.engine.driver import agent_sampling, run_loop


def test_the_loop_reads_every_chunk_and_ends_boxed(smollm2_dir):
    engine = create_engine(str(smollm2_dir), EngineConfig(kind="echo"))
    codec = ChatCodec(engine.tokenizer)
    ids = codec.encode("The sky is blue. " * 120)
    cfg = AgentConfig(chunk_size=128, memory_budget=16, final_budget=8)
    loop = make_loop("What colour is the sky?", list(iter_chunks([ids], 128)), codec, cfg)
    result = asyncio.run(run_loop(engine, loop, agent_sampling(cfg)))
    assert result.n_turns == n_turns(len(ids), 128) and result.doc_tokens == len(ids)
    assert result.prediction == "echo"


@pytest.mark.parametrize("command", ["serve", "train"])
def test_serve_and_train_refuse_it(command, capfd):
    from pipelines import cli

    assert cli.main([command, "engine.kind=echo", "track.enabled=false"]) == 2
    line = capfd.readouterr().err.strip().splitlines()[-1]  # after the line naming the log file
    assert line.startswith("memagent: error: engine.kind=echo: ") and f"`memagent {command}` needs" in line
    refuse_stand_in(EngineConfig(kind="vllm"), command)  # a model engine passes
