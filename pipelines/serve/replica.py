"""One replica's work: an engine and the memory loops of many documents running on it.

Every request is an `AgentLoop` driven as its own coroutine on the replica's engine, so
the turns of all documents in flight interleave in the engine's batch. Plain class:
`deployments.Agent` wraps it for Ray Serve; it never raises for bad input: a call returns a
`Reply` (schema.py), a batch row an `OutputRow` with its `error` (jobs.py).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path

from pipelines.agent import AgentConfig, make_loop
from pipelines.agent.codec import ChatCodec
from pipelines.engine import EngineConfig, GenRequest, Sampling, create_engine
from pipelines.engine.driver import agent_sampling, run_loop
from pipelines.models import resolve_model
from pipelines.serve.config import ServeConfig
from pipelines.serve.documents import DocLimits, Documents
from pipelines.serve.jobs import OutputRow
from pipelines.serve.schema import DOC_FIELDS, ChatRequest, Reply, ServeError
from pipelines.serve.state import read_model_state


VERSION_CHECK_S = 2.0


@dataclass(frozen=True)
class ReplicaSettings:
    model: str
    home: str
    state_dir: str
    engine: EngineConfig
    agent: AgentConfig
    serve: ServeConfig
    tracking_uri: str | None = None  # where models:/ refs are fetched from


class AgentCore:
    def __init__(self, settings: ReplicaSettings, engine, model: str):
        self.settings, self.engine, self.model = settings, engine, model
        self.codec = ChatCodec(engine.tokenizer)
        limits = DocLimits(settings.agent.chunk_size, settings.serve.max_doc_tokens)
        self.docs = Documents.for_serve(self.codec, limits, settings.serve)
        self.ongoing = 0
        self._checked = float("-inf")  # the first request re-reads the state: a reload may have come since create()
        self._reload_lock = asyncio.Lock()

    @classmethod
    def create(cls, settings: ReplicaSettings) -> "AgentCore":
        """Serves the last reloaded version if there was one, else the configured model."""
        model, version = read_model_state(settings.state_dir) or (settings.model, 0)
        model_dir = _model_dir(settings, model)
        return cls(settings, create_engine(str(model_dir), settings.engine, version), model)

    async def sync_version(self) -> None:
        """Catch up with a reload this replica missed (it was restarting when it was broadcast)."""
        now = time.monotonic()
        if now - self._checked < VERSION_CHECK_S:
            return
        self._checked = now
        latest = await asyncio.to_thread(read_model_state, self.settings.state_dir)
        if latest and latest[1] > self.engine.version:
            await self.reload(*latest)

    async def _run(self, question: str, doc: dict) -> dict:
        await self.sync_version()
        self.ongoing += 1
        try:
            chunks = self.docs.chunks(**{k: doc.get(k) for k in DOC_FIELDS})
            loop = make_loop(question, chunks, self.codec, self.settings.agent)
            start = time.perf_counter()
            result = await run_loop(self.engine, loop, agent_sampling(self.settings.agent))
            return {"answer": result.answer, "prediction": result.prediction, "turns": result.n_turns,
                    "doc_tokens": result.doc_tokens, "seconds": round(time.perf_counter() - start, 3),
                    "model_version": self.engine.version, "memory": result.memory}
        finally:
            self.ongoing -= 1

    async def answer(self, req: dict) -> Reply:
        """/v1/answer: the body was validated by the gateway."""
        try:
            out = await self._run(req["question"], req)
        except Exception as e:  # noqa: BLE001 - every failure becomes a one-line reason
            return Reply.failure(e)
        if not req.get("show_memory"):
            out.pop("memory")
        return Reply(out)

    async def answer_row(self, row: dict) -> OutputRow:
        """A batch row -> its output row; a failing document gets its reason in `error`."""
        if row.get("error"):
            return OutputRow.failed(row, row["error"], self.engine.version)
        version = self.engine.version
        try:
            res = await self._run(row["question"], row)
        except Exception as e:  # noqa: BLE001
            return OutputRow.failed(row, Reply.failure(e).error, version)
        return OutputRow(row["id"], row.get("question"), row.get("doc_id"), res["answer"], res["prediction"],
                         res["memory"], res["turns"], res["doc_tokens"], res["seconds"], res["model_version"])

    async def chat(self, body: dict) -> Reply:
        """OpenAI chat completion straight to the engine: no memory loop."""
        try:
            req = ChatRequest.model_validate(body)
            prompt = self.codec.encode_chat([m.model_dump() for m in req.messages])
            room = self.settings.engine.max_model_len - len(prompt)
            if room <= 0:
                raise ServeError(f"messages: {len(prompt)} tokens leave no room in max_model_len="
                                 f"{self.settings.engine.max_model_len}", 400)
            wanted = req.max_completion_tokens or req.max_tokens or self.settings.serve.chat_max_tokens
            sampling = Sampling(max_tokens=min(wanted, room), temperature=req.temperature, top_p=req.top_p,
                                seed=req.seed)
            out = await self.engine.generate(GenRequest(sampling, prompt_ids=prompt))
        except Exception as e:  # noqa: BLE001
            return Reply.failure(e)
        return Reply(chat_completion(self.model, req.model, out, len(prompt), self.engine.version))

    async def resolve(self, model: str) -> Reply:
        """Checks (and fetches) a model reference before any replica is told to load it."""
        try:
            path = await asyncio.to_thread(_model_dir, self.settings, model)
        except Exception as e:  # noqa: BLE001
            return Reply.failure(e)
        return Reply({"model": model, "path": str(path)})

    async def reload(self, model: str, version: int) -> dict:
        """Swap weights in place; requests in flight keep going (their later turns use the new ones)."""
        async with self._reload_lock:
            if version > self.engine.version:
                path = await asyncio.to_thread(_model_dir, self.settings, model)
                await self.engine.load_weights(str(path), version)
                self.model = model
        return self.info()

    def info(self) -> dict:
        return {"model": self.model, "version": self.engine.version, "pid": os.getpid(),
                "ongoing": self.ongoing}

    async def close(self) -> None:
        await self.engine.close()


def _model_dir(settings: ReplicaSettings, model: str) -> Path:
    return resolve_model(model, Path(settings.home), settings.tracking_uri)


def chat_completion(served: str, asked: str | None, out, n_prompt: int, version: int) -> dict:
    return {
        "id": f"chatcmpl-{os.getpid()}-{time.monotonic_ns()}", "object": "chat.completion",
        "created": int(time.time()), "model": asked or served, "system_fingerprint": f"v{version}",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": out.text},
                     "finish_reason": out.finish_reason, "logprobs": None}],
        "usage": {"prompt_tokens": n_prompt, "completion_tokens": len(out.token_ids),
                  "total_tokens": n_prompt + len(out.token_ids)},
    }
