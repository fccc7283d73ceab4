"""WorkerCore without Ray: the transformers engine and a tiny random model (only shapes matter)."""

from __future__ import annotations

import asyncio

import pytest

from pipelines.agent.chunking import n_turns
from pipelines.config import load_config
from pipelines.engine.hf_engine import HFEngine
from pipelines.rollout.core import RolloutSpec, WorkerCore
from pipelines.rollout.schedule import GroupTask
from tests.rollout.helpers import needle_row


@pytest.fixture(scope="module")
def core(tiny_model_dir):
    cfg = load_config(None, ["agent.chunk_size=64", "agent.memory_budget=6", "agent.final_budget=4"])
    return WorkerCore(HFEngine(str(tiny_model_dir)), cfg.agent, loops=8, name="w")


def test_groups_record_every_turn_with_logprobs_and_versions(core, tiny_model_dir):
    rows = [needle_row(0, 2), needle_row(1, 9)]
    spec = RolloutSpec(temperature=1.0, reward="tests.rollout.test_rollout_ray:parity_reward")

    async def run():
        first = await asyncio.gather(*(core.run_group(GroupTask(f"{r.sample_id}#1", r, 3), spec) for r in rows))
        await core.engine.load_weights(str(tiny_model_dir), 1)
        second = await core.run_group(GroupTask("n0#2", rows[0], 2), spec)
        return first, second

    first, second = asyncio.run(run())
    for g, r in zip(first, rows):
        tokens = len(core.codec.encode(r.context))
        assert g.sample_id == r.sample_id and len(g.trajectories) == 3
        for t in g.trajectories:
            assert t.doc_tokens == tokens and len(t.turns) == n_turns(tokens, 64)
            assert all(len(x.logprobs) == len(x.response_ids) for x in t.turns)
            assert all(len(x.response_ids) <= 6 for x in t.turns[:-1]) and len(t.turns[-1].response_ids) <= 4
            assert t.reward in (0.0, 1.0) and (t.version_min, t.version_max) == (0, 0)
    assert [(t.version_min, t.version_max) for t in second.trajectories] == [(1, 1), (1, 1)]
    assert core.rollouts_done == 8


def test_a_bad_row_raises_a_one_line_error(core):
    from pipelines.errors import UserError

    row = needle_row(0, 2)
    bad = type(row)(**{**row.__dict__, "question": "  "})
    with pytest.raises(UserError, match="question: empty"):
        asyncio.run(core.run_group(GroupTask("bad#1", bad, 1), RolloutSpec()))
