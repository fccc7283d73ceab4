"""What a rollout worker does, without Ray: one engine, many agent loops as asyncio tasks.

Each rollout is its own task that submits its next turn the moment the previous one
returns, so samples never wait for each other at a chunk step (the MemAgent release
waits for the slowest sample at every step). A semaphore caps the loops in flight; the
engine batches whatever is queued.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Any

from pipelines.agent import AgentConfig, Loop, Method, make_loop
from pipelines.agent.codec import ChatCodec
from pipelines.engine.base import Engine, Sampling
from pipelines.engine.driver import run_loop
from pipelines.agent.reward import accuracy
from pipelines.data.tasks import task_chunks
from pipelines.rollout.rewards import compute_reward, load_reward, with_costs
from pipelines.rollout.schedule import GroupTask
from pipelines.rollout.trajectory import Group, Trajectory


@dataclass(frozen=True)
class RolloutSpec:
    """How a group is sampled and scored; travels with each group, so one worker serves many runs."""

    temperature: float = 1.0
    top_p: float = 1.0
    reward: str | None = None  # dotted path of a user reward; None: the training verifier
    # memagent: the memory loop; truncation / full: the one-turn baselines (evaluation).
    method: Method = "memagent"
    window: int = 0  # the one-turn baselines' prompt + answer tokens
    seed: int | None = None  # per-request sampling seed: a reproducible evaluation
    turn_cost: float = 0.0  # subtracted from the reward per chunk read (learn.turn_cost)
    ground_cost: float = 0.0  # subtracted per ungrounded memory turn (learn.ground_cost)

    @property
    def sampling(self) -> Sampling:
        return Sampling(temperature=self.temperature, top_p=self.top_p, seed=self.seed, logprobs=True)


def open_store(cfg: Any) -> Any:
    """The chunk store rows with a doc_id read from (opened lazily: inline rows never touch it)."""
    from pipelines.data.config import store_uri
    from pipelines.data.store import ChunkStore

    return ChunkStore(store_uri(cfg))


class WorkerCore:
    def __init__(self, engine: Engine, agent: AgentConfig, loops: int, name: str = "local", store: Any = None):
        self.engine = engine
        self.codec = ChatCodec(engine.tokenizer)
        self.agent = agent
        self.name = name
        self.store = store
        self._slots = asyncio.Semaphore(loops)
        self.rollouts_done = 0

    async def run_group(self, task: GroupTask, spec: RolloutSpec) -> Group:
        reward = load_reward(spec.reward)
        trajectories = await asyncio.gather(*(self.run_rollout(task, i, spec, reward)
                                              for i in range(task.group_size)))
        return Group(task.group_id, task.row.sample_id, list(trajectories))

    async def run_rollout(self, task: GroupTask, index: int, spec: RolloutSpec, reward: Any = None) -> Trajectory:
        row = task.row
        async with self._slots:
            start = time.perf_counter()
            result = await run_loop(self.engine, self.make_loop(row, spec), spec.sampling)
            seconds = time.perf_counter() - start
        self.rollouts_done += 1
        value = compute_reward(reward, result.answer, row.answers, row.answer_kind, row.sample_id)
        return Trajectory(
            sample_id=row.sample_id, group_id=task.group_id, index=index, turns=result.turns,
            memory=list(result.memory), answer=result.answer, prediction=result.prediction,
            reward=with_costs(value, turn_cost=spec.turn_cost, chunks_read=result.chunks_read,
                              ground_cost=spec.ground_cost, ungrounded=result.ungrounded),
            accuracy=accuracy(result.prediction, row.answers, row.answer_kind),
            truncated=result.truncated, doc_tokens=result.doc_tokens, seconds=seconds, worker=self.name,
            malformed=result.malformed, chunks_unread=self.chunks_unread(row, result), ungrounded=result.ungrounded)

    def chunks_unread(self, row: Any, result: Any) -> int:
        """Chunks of the row's document an exited loop never read, by the row's document length
        (the loop stops taking chunks at the exit, so it never counts them itself)."""
        if result.exit_chunk is None:
            return 0
        return max(math.ceil(row.doc_tokens / self.agent.chunk_size) - result.chunks_read, 0)

    def make_loop(self, row: Any, spec: RolloutSpec) -> Loop:
        chunks = task_chunks(row, self.store, self.codec, self.agent.chunk_size)
        return make_loop(row.question, chunks, self.codec, self.agent, spec.method, spec.window, keep_ids=True)
