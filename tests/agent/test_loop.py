"""The sans-IO loop driven by hand: no engine, responses scripted per request."""

import asyncio

import pytest

from pipelines.agent import get_templates
from pipelines.agent.chunking import iter_chunks, n_turns
from pipelines.agent.codec import ChatCodec
from pipelines.agent import Response
from pipelines.agent.loop import AgentLoop, LoopLimits
from pipelines.errors import UserError

LIMITS = LoopLimits(memory_budget=16, final_budget=8, question_budget=64)


def make(tokenizer, n_tokens, chunk=100, keep=True):
    ids = (tokenizer.encode("alpha beta gamma delta " * 400, add_special_tokens=False))[:n_tokens]
    codec = ChatCodec(tokenizer)
    return AgentLoop("Which word?", list(iter_chunks([ids], chunk)), codec, get_templates("release"), LIMITS, keep), codec


def drive(loop, codec, reply):
    while (req := loop.next_request()) is not None:
        ids = codec.encode(reply(req))[: req.max_tokens]
        loop.feed(Response(ids, codec.decode(ids), "length", [-0.5] * len(ids)))
    return loop.result()


@pytest.mark.parametrize("n_tokens", [250, 300, 50])
def test_turns_and_memory_budget(tokenizer, n_tokens):
    loop, codec = make(tokenizer, n_tokens)
    result = drive(loop, codec, lambda r: "memory " * 100 if not r.is_final else "so \\boxed{gamma} done")
    assert result.n_turns == n_turns(n_tokens, 100)
    assert result.doc_tokens == n_tokens
    assert all(n <= LIMITS.memory_budget for n in result.memory_tokens)
    assert result.prediction == "gamma"
    convs = result.turns
    assert len(convs) == result.n_turns and convs[-1].is_final and not any(c.is_final for c in convs[:-1])
    assert all(len(c.logprobs) == len(c.response_ids) for c in convs)


def test_memory_is_overwritten_and_fed_forward(tokenizer):
    loop, codec = make(tokenizer, 250)
    seen = []

    def reply(req):
        seen.append(codec.tokenizer.decode(req.prompt_ids))
        return f"note {req.turn}"

    result = drive(loop, codec, reply)
    assert "No previous memory" in seen[0]
    assert "<memory>\nnote 0\n</memory>" in seen[1] and "note 0" not in seen[2]
    assert result.memory == ["note 0", "note 1", "note 2"]
    assert result.prediction is None  # no \boxed{}: reported missing, not guessed


def test_request_sequence_is_enforced(tokenizer):
    loop, codec = make(tokenizer, 50)
    loop.next_request()
    with pytest.raises(RuntimeError):
        loop.next_request()
    with pytest.raises(RuntimeError, match="max_tokens"):
        loop.feed(Response(list(range(100)), "x"))


def test_bad_inputs(tokenizer):
    codec = ChatCodec(tokenizer)
    with pytest.raises(UserError, match="question: empty"):
        AgentLoop("  ", [], codec, get_templates("release"), LIMITS)
    with pytest.raises(UserError, match="question_budget"):
        AgentLoop("why " * 200, [], codec, get_templates("release"), LIMITS)
    loop = AgentLoop("q?", [], codec, get_templates("release"), LIMITS)
    with pytest.raises(UserError, match="document: empty"):
        loop.next_request()


def test_hf_engine_drives_loop(tiny_model_dir, tokenizer):
    """The transformers engine on a tiny random model: shapes, budgets, logprobs."""
    from pipelines.engine.base import Sampling
    from pipelines.engine.driver import run_loop
    from pipelines.engine.hf_engine import HFEngine

    async def go():
        engine = HFEngine(str(tiny_model_dir))
        loop, _ = make(tokenizer, 250)
        result = await run_loop(engine, loop, Sampling(max_tokens=1, temperature=1.0, seed=1, logprobs=True))
        await engine.close()
        return result

    result = asyncio.run(go())
    assert result.n_turns == 4
    for conv in result.turns:
        assert 0 < len(conv.response_ids) <= (8 if conv.is_final else 16)
        assert len(conv.logprobs) == len(conv.response_ids) and all(lp <= 0 for lp in conv.logprobs)
