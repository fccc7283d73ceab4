"""What a rollout worker does, without Ray: one engine, many agent loops as asyncio tasks.

Each rollout is its own task that submits its next turn the moment the previous one
returns, so samples never wait for each other at a chunk step (the MemAgent release
waits for the slowest sample at every step). A semaphore caps the loops in flight; the
engine batches whatever is queued.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.agent.codec import ChatCodec
from pipelines.agent.direct import DirectLoop, Method
from pipelines.agent.loop import AgentLoop
from pipelines.ask import make_loop
from pipelines.config import AgentConfig
from pipelines.engine.base import Engine, GenRequest, Sampling
from pipelines.ingest.tasks import score, task_chunks
from pipelines.rollout.rewards import compute_reward, load_reward
from pipelines.rollout.schedule import GroupTask
from pipelines.rollout.trajectory import Group, Trajectory, Turn


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


def store_uri(cfg: Any) -> str | None:
    """rollout.store, else ingest.store; a relative local path made absolute here (the driver)."""
    uri = cfg.rollout.store or getattr(getattr(cfg, "ingest", None), "store", None)
    if not uri or "://" in uri:
        return uri
    return str(Path(uri).expanduser().absolute())


def open_store(cfg: Any) -> Any:
    """The chunk store rows with a doc_id read from (opened lazily: inline rows never touch it)."""
    uri = store_uri(cfg)
    if not uri:
        return None
    from pipelines.ingest.store import ChunkStore

    return ChunkStore(uri)


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
            loop = self.make_loop(row, spec)
            turns = await self.drive(loop, spec)
            result = loop.result()
            seconds = time.perf_counter() - start
        self.rollouts_done += 1
        value = compute_reward(reward, result.answer, row.answers, row.answer_kind, row.sample_id)
        return Trajectory(
            sample_id=row.sample_id, group_id=task.group_id, index=index, turns=turns,
            memory=list(result.memory), answer=result.answer, prediction=result.prediction,
            reward=value, accuracy=score(row, result.prediction)["sub_em"],
            doc_tokens=result.doc_tokens, seconds=seconds, worker=self.name)

    def make_loop(self, row: Any, spec: RolloutSpec) -> AgentLoop | DirectLoop:
        chunks = task_chunks(row, self.store, self.codec, self.agent.chunk_size)
        if spec.method == "memagent":
            return make_loop(row.question, chunks, self.codec, self.agent, keep=True)
        return DirectLoop(row.question, chunks, self.codec, spec.window, self.agent.final_budget,
                          full=spec.method == "full", keep_conversations=True)

    async def drive(self, loop: AgentLoop | DirectLoop, spec: RolloutSpec) -> list[Turn]:
        """Run one loop to its end; the loop keeps each conversation, we add versions and time."""
        stamps: list[tuple[int, int, float]] = []
        while (req := loop.next_request()) is not None:
            t0 = time.perf_counter()
            sampling = Sampling(req.max_tokens, spec.temperature, spec.top_p, spec.seed, logprobs=True)
            out = await self.engine.generate(GenRequest(sampling, req.prompt_ids))
            if out.logprobs is None or len(out.logprobs) != len(out.token_ids):
                raise RuntimeError("engine returned no logprob for some sampled tokens")
            loop.feed(out.token_ids, out.text, out.logprobs, out.finish_reason)
            end = max(out.policy_version, self.engine.version)
            stamps.append((out.policy_version, end, time.perf_counter() - t0))
        return [Turn(c.prompt_ids, c.response_ids, c.logprobs, c.finish_reason, c.is_final, v0, v1, sec)
                for c, (v0, v1, sec) in zip(loop.result().conversations, stamps)]
