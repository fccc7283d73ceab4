"""The transformers continuous-batching engine on CPU: many concurrent requests, greedy parity
with the plain HF engine, weight swaps while requests are in flight (both swap paths)."""

import asyncio

import pytest
import torch

from pipelines.engine import EngineConfig
from pipelines.engine import GenRequest, Sampling, create_engine
from pipelines.engine.hf_engine import HFEngine
from pipelines.engine.streaming import collect
from pipelines.errors import UserError

CFG = EngineConfig(kind="hf_batch", max_model_len=1024, max_num_seqs=8, cpu_kvcache_gib=1, max_batch_tokens=512)
PROMPTS = ["Tell me about the sea.", "What is the capital of France?", "Count to ten.", "Hello there!"]


@pytest.fixture(scope="module")
def engine(tiny_model_dir):
    eng = create_engine(str(tiny_model_dir), CFG)
    yield eng
    asyncio.run(eng.close())


@pytest.fixture(scope="module")
def other_weights(tmp_path_factory, tiny_model_dir):
    """The tiny model's shapes with other random weights: what a learner would publish."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path_factory.mktemp("tiny-v1")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(out)
    return out


def prompt_ids(engine, text):
    return engine.codec.encode_user(text)


def check(out, max_tokens, logprobs=True):
    assert 0 < len(out.token_ids) <= max_tokens
    assert out.finish_reason in ("stop", "length")
    if out.finish_reason == "length":
        assert len(out.token_ids) == max_tokens
    if logprobs:
        assert len(out.logprobs) == len(out.token_ids)
        assert all(lp <= 1e-6 for lp in out.logprobs)


def test_concurrent_requests_all_complete(engine):
    reqs = [GenRequest(Sampling(4 + 3 * i, temperature=1.0, logprobs=True), prompt_ids(engine, PROMPTS[i % 4]))
            for i in range(12)]

    async def run():
        return await asyncio.gather(*(engine.generate(r) for r in reqs))

    outs = asyncio.run(run())
    for req, out in zip(reqs, outs):
        check(out, req.sampling.max_tokens)
        assert out.version == engine.version
    assert any(o.finish_reason == "length" for o in outs)


def test_greedy_matches_hf_engine_under_load(engine, tiny_model_dir):
    """Greedy requests batched with sampled ones give what HF generate gives alone."""
    ref = HFEngine(str(tiny_model_dir), "float32")
    greedy = [GenRequest(Sampling(16), prompt_ids(engine, p)) for p in PROMPTS[:2]]
    noise = [GenRequest(Sampling(16, temperature=1.0), prompt_ids(engine, p)) for p in PROMPTS]

    async def run():
        outs = await asyncio.gather(*(engine.generate(r) for r in greedy + noise))
        return outs[:len(greedy)], [await ref.generate(r) for r in greedy]

    ours, theirs = asyncio.run(run())
    for a, b in zip(ours, theirs):
        assert a.token_ids == b.token_ids and a.text == b.text and a.finish_reason == b.finish_reason


@pytest.mark.parametrize("path", ["pause", "drain"])
def test_weight_swap_mid_stream_drops_nothing(engine, tiny_model_dir, other_weights, path):
    """`pause` is how 5.19 swaps; `drain` is the 5.17 path (no pause there), run here on purpose."""
    from transformers import AutoModelForCausalLM

    reqs = [GenRequest(Sampling(96, temperature=1.0, logprobs=True), prompt_ids(engine, PROMPTS[i % 4]))
            for i in range(6)]
    before = engine.version
    target = other_weights if before % 2 == 0 else tiny_model_dir

    async def swap():
        await asyncio.sleep(0.05)
        if path == "pause":
            await engine.load_weights(str(target), before + 1)
        else:
            state = AutoModelForCausalLM.from_pretrained(target).state_dict()
            await engine._swap_drained(state)
            engine.version = before + 1

    async def run():
        outs, _ = await asyncio.gather(asyncio.gather(*(engine.generate(r) for r in reqs)), swap())
        after = await engine.generate(GenRequest(Sampling(12), prompt_ids(engine, PROMPTS[0])))
        ref = await HFEngine(str(target), "float32").generate(GenRequest(Sampling(12), prompt_ids(engine, PROMPTS[0])))
        return outs, after, ref

    outs, after, ref = asyncio.run(run())
    assert len(outs) == len(reqs)
    for out in outs:
        check(out, 96)
        assert out.version in (before, before + 1)
    assert engine.version == before + 1 and after.version == before + 1
    assert after.token_ids == ref.token_ids  # the new weights are the ones in use


def test_nucleus_sampling_is_refused_by_name(engine):
    req = GenRequest(Sampling(4, temperature=1.0, top_p=0.9), prompt_ids(engine, PROMPTS[0]))
    with pytest.raises(UserError, match="top_p=0.9"):
        asyncio.run(engine.generate(req))


def test_stream_matches_generate_and_ends_at_stop_strings(engine):
    """The manager has no stop strings: the stream cancels at one. A closed stream's request is
    cancelled too, and no result handler is left behind for either."""
    p = prompt_ids(engine, PROMPTS[1])

    async def run():
        full = await engine.generate(GenRequest(Sampling(16), p))
        streamed = await collect(engine.stream(GenRequest(Sampling(16), p)))
        stop = full.text[2:4]  # the tiny random model's greedy text is newlines
        cut = await engine.generate(GenRequest(Sampling(16, stop=(stop,)), p))
        left = engine.stream(GenRequest(Sampling(512), p))
        first = await anext(left)
        await left.aclose()
        return full, streamed, stop, cut, first

    full, streamed, stop, cut, first = asyncio.run(run())
    assert streamed == (full.token_ids, full.text, full.finish_reason)
    assert cut.text == full.text[:full.text.index(stop)] and cut.finish_reason == "stop"
    assert len(cut.token_ids) < len(full.token_ids) and first.token_ids
    assert engine.manager.output_router.result_handlers == {}
