"""The grounding cost (learn.ground_cost): a memory turn that states a number its prompt does not
hold (invented before the needle was read, or a read one cut short) is counted, costs reward, and
shows as rollout/ungrounded_rate. WorkerCore on a real HF Llama scripted to write a fixed memory."""

from __future__ import annotations

import asyncio
import math

import pytest

from pipelines.agent import AgentConfig
from pipelines.agent.codec import ChatCodec
from pipelines.engine.hf_engine import HFEngine
from pipelines.rollout.core import RolloutSpec, WorkerCore
from pipelines.rollout.metrics import rollout_metrics
from pipelines.rollout.rewards import with_costs
from pipelines.rollout.schedule import GroupTask
from pipelines.rollout.trajectory import Group, from_row, to_row
from tests.rollout.helpers import needle_row
from tests.support import scripted_llama

def test_costs_add_up():
    assert with_costs(1.0) == 1.0
    assert with_costs(1.0, ground_cost=0.25, ungrounded=2) == pytest.approx(0.5)
    assert with_costs(1.0, turn_cost=0.05, chunks_read=4, ground_cost=0.25, ungrounded=1) == pytest.approx(0.55)


@pytest.fixture(scope="module")
def inventor(tmp_path_factory, tokenizer):
    """Greedy, it answers every turn "is: 8539." (digits none of the rows below hold)."""
    codec = ChatCodec(tokenizer)
    newline = codec.encode_user("x")[-1]
    chain = [newline, *codec.encode("is: 8539."), tokenizer.eos_token_id]
    return scripted_llama(tmp_path_factory.mktemp("inventor"), tokenizer, chain)


def test_only_the_turn_that_invents_a_number_pays(inventor):
    agent = AgentConfig(chunk_size=32, memory_budget=12, final_budget=12)
    core = WorkerCore(HFEngine(str(inventor)), agent, loops=2)
    row = needle_row(0, 4)  # ~96 noise tokens, then "The special magic number is 1000."

    def run(cost: float):
        group = asyncio.run(core.run_group(GroupTask("n0#1", row, 1), RolloutSpec(temperature=0.0, ground_cost=cost)))
        return group.trajectories[0]

    t = run(0.5)
    assert len(t.memory) >= 3 and all(m == "is: 8539." for m in t.memory)
    # The first memory turn invents 8539; every later one reads it in its previous memory.
    assert t.ungrounded == 1 and t.reward == -0.5
    assert run(0.0).reward == 0.0  # off: the paper's reward
    m = rollout_metrics([Group("n0#1", "n0", [t])])
    assert m["rollout/ungrounded_rate"] == pytest.approx(1 / len(t.memory))
    assert from_row(to_row(t)) == t
    # An eval cell's records carry the count; its summary, the share of rows that ever invented.
    from pipelines.eval.records import RowRef, trajectory_record
    from pipelines.eval.results import summarize

    rec = trajectory_record(RowRef(("needle", "1K", "memagent"), 0, row), t, traces=0)
    assert rec["ungrounded"] == 1
    assert summarize([rec, {**rec, "ungrounded": 0}])["ungrounded"] == 0.5
    assert math.isnan(summarize([{k: v for k, v in rec.items() if k != "ungrounded"}])["ungrounded"])  # older cells


def test_rows_of_schema_3_read_as_uncounted():
    from tests.rollout.helpers import trajectory

    row = to_row(trajectory("a#1", 0, 1.0))
    old = {k: v for k, v in row.items() if k != "ungrounded"}
    assert from_row({**old, "schema_version": 3}).ungrounded == 0


def test_a_grounded_agent_never_keeps_the_invented_number(inventor):
    """agent.grounded: the invented memory is dropped every turn, so every turn invents again (and
    pays); the trajectory's memories are the initial one throughout."""
    agent = AgentConfig(chunk_size=32, memory_budget=12, final_budget=12, grounded=True)
    core = WorkerCore(HFEngine(str(inventor)), agent, loops=2)
    spec = RolloutSpec(temperature=0.0, ground_cost=0.25)
    t = asyncio.run(core.run_group(GroupTask("n0#1", needle_row(0, 4), 1), spec)).trajectories[0]
    assert len(t.memory) >= 3 and set(t.memory) == {"No previous memory"}
    assert t.ungrounded == len(t.memory) and t.reward == pytest.approx(-0.25 * len(t.memory))
