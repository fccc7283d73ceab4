"""SFT warm start on the learner: the tiny random Llama fine-tuned on memory traces whose final
answer is always "7" learns to box it (the loss falls; greedy decoding of the final turn of
a saved HF folder, through the HF engine, gives \\boxed{7})."""

from __future__ import annotations

import asyncio
import math


from pipelines.agent.config import AgentConfig
from pipelines.engine.base import GenRequest, Sampling
from pipelines.engine.hf_engine import HFEngine
from pipelines.learn.config import LearnConfig
from pipelines.learn.policy import Policy
from pipelines.learn.sftdata import TraceRows, seq_of
from pipelines.learn.weights import save_hf_folder
from tests.learn.rows import synthetic_rows, token_counter
from tests.tiny import TINY_LEARN


def test_sft_on_a_constant_answer_learns_to_box_it(tmp_path, tiny_model_dir, tokenizer):
    agent = AgentConfig(chunk_size=128, memory_budget=16, final_budget=8)
    count = token_counter(tokenizer)
    rows = [r for n in (4, 8) for r in synthetic_rows(1, count, answer=lambda i: "7", repeats=n)]
    # What the Ray Data map of `memagent train --sft` does to each batch of rows, called directly.
    traces = TraceRows(str(tiny_model_dir), agent, None).table(rows).to_pylist()
    finals = [t for t in traces if t["is_final"]]
    assert len(finals) == 2 and len(traces) > 2
    assert {tokenizer.decode(t["response_ids"], skip_special_tokens=True) for t in finals} == {"\\boxed{7}"}
    batch = [seq_of(t) for t in traces]

    policy = Policy(str(tiny_model_dir), LearnConfig(lr=1e-2, token_budget=2048, seed=0, **TINY_LEARN))
    boxed = [seq_of(t) for t in finals]
    assert policy.eval_sft(boxed, range(len(boxed)), 4)[1] == 0.0  # a random model is sure of no token
    losses = []
    for _ in range(60):  # ~30 steps at this learning rate; stops as soon as the answer is learnt
        losses.append(policy.step(batch, sft=True)["loss"])
        if losses[-1] < 0.2:
            break
    assert all(math.isfinite(x) for x in losses)
    print(f"SFT: {len(losses)} steps, loss {losses[0]:.3g} -> {losses[-1]:.3g}")
    assert losses[-1] < losses[0] / 10, losses
    assert policy.eval_sft(boxed, range(len(boxed)), 4)[1] == 1.0  # greedy writes the answer's first tokens, teacher-forced

    model_dir = save_hf_folder(policy.model, str(tiny_model_dir), tmp_path / "sft")
    engine = HFEngine(str(model_dir), "float32")
    final_prompt = finals[0]["prompt_ids"]
    resp = asyncio.run(engine.generate(GenRequest(Sampling(max_tokens=agent.final_budget), prompt_ids=final_prompt)))
    assert resp.text.strip() == "\\boxed{7}", (resp.text, losses)


def test_sft_at_the_default_rate_lowers_the_heldout_loss(tiny_model_dir, tokenizer):
    """The embedded recipe's SFT rate and schedule (learn.sft, warm-up included), only the layer count
    shrunk for the 2-layer model: a few steps lower the loss on traces of rows it never saw."""
    count = token_counter(tokenizer)
    agent = AgentConfig(chunk_size=128, memory_budget=16, final_budget=16)
    rows = synthetic_rows(12, count, repeats=4)
    trace = TraceRows(str(tiny_model_dir), agent, None)
    train, heldout = ([seq_of(t) for t in trace.table(part).to_pylist()] for part in (rows[:8], rows[8:]))
    learn = LearnConfig(freeze_layers=0).for_mode(sft=True)
    assert learn.lr == LearnConfig().sft.lr and learn.warmup_steps == LearnConfig().warmup_steps
    policy = Policy(str(tiny_model_dir), learn)
    before, _ = policy.eval_sft(heldout)
    for _ in range(12):
        policy.step(train, sft=True)
    after, _ = policy.eval_sft(heldout)
    assert math.isfinite(after) and after < before - 0.05, (before, after)
