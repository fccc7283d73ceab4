"""One replica's work: an engine and the memory loops of many documents running on it.

Every request is an `AgentLoop` driven as its own coroutine on the replica's engine, so
the turns of all documents in flight interleave in the engine's batch. Plain class:
`deployments.Agent` wraps it for Ray Serve; it never raises for bad input: a call returns a
`Reply` (schema.py), a batch row an `OutputRow` with its `error` (schema.py), and a streamed
call yields its events, its first item being that Reply when the request fails its checks.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

from pipelines.agent import AgentConfig, AgentResult, Loop, make_loop
from pipelines.agent.codec import ChatCodec
from pipelines.config import home_dir
from pipelines.engine import EngineConfig, create_engine
from pipelines.engine.driver import agent_sampling, run_loop
from pipelines.models import resolve_model
from pipelines.serve import chat
from pipelines.serve.config import ServeConfig
from pipelines.serve.documents import DocLimits, Documents, Reading
from pipelines.serve.schema import DOC_FIELDS, Answered, OutputRow, Reply
from pipelines.serve.follow import pin
from pipelines.serve.state import read_model_state


VERSION_CHECK_S = 2.0


@dataclass(frozen=True)
class ReplicaSettings:
    model: str
    home: str  # the driver's home, absolute: used on a node that sets no MEMAGENT_HOME of its own
    state_dir: str  # where the app records reloads; "" (a batch actor): serve `model`, follow nothing
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
        self.ongoing = 0  # documents whose loop is running
        self.turns = 0  # turns run since start (all documents)
        self._checked = float("-inf")  # the first request re-reads the state: a reload may have come since create()
        self._reload_lock = asyncio.Lock()
        self.on_load: Callable[[str, int], None] = lambda model, version: None  # after each reload
        self.on_trace: Callable[[dict], None] | None = None  # a sampled answer's trace record (serve.trace_sample)

    @classmethod
    def create(cls, settings: ReplicaSettings) -> "AgentCore":
        """Serves the last reloaded version if there was one, else the configured model."""
        model, version = (settings.state_dir and read_model_state(settings.state_dir)) or (settings.model, 0)
        if settings.tracking_uri:  # models:/NAME@ALIAS -> the models:/NAME/VERSION it names now
            model = pin(model, settings.tracking_uri)
        model_dir = _model_dir(settings, model)
        return cls(settings, create_engine(str(model_dir), settings.engine, version), model)

    async def sync_version(self) -> None:
        """Catch up with a reload this replica missed (it was restarting when it was broadcast)."""
        now = time.monotonic()
        if not self.settings.state_dir or now - self._checked < VERSION_CHECK_S:
            return
        self._checked = now
        latest = await asyncio.to_thread(read_model_state, self.settings.state_dir)
        if latest and latest[1] > self.engine.version:
            await self.reload(*latest)

    def _open(self, question: str, doc: dict) -> tuple[Loop, Reading]:
        """The document's loop; fails here, before any turn, on what can be checked cheaply."""
        reading = self.docs.chunks(**{k: doc.get(k) for k in DOC_FIELDS})
        return make_loop(question, reading, self.codec, self.settings.agent), reading

    async def _drive(self, loop: Loop, reading: Reading, on_turn: Callable[[AgentResult], None] | None = None,
                     doc: dict | None = None) -> Answered:
        """One document's loop on the engine; cancelled, it stops before its next turn. A sampled
        answer's trace record goes to on_trace (doc: the request, for its document's name)."""
        def turned(progress: AgentResult) -> None:
            self.turns += 1
            if on_turn is not None:
                on_turn(progress)

        self.ongoing += 1
        try:
            start = time.perf_counter()
            result = await run_loop(self.engine, loop, agent_sampling(self.settings.agent), turned)
            if self.on_trace is not None and random.random() < self.settings.serve.trace_sample:
                self.on_trace(trace_record(result, doc or {}, self.model, self.engine.version,
                                           self.settings.serve.trace_documents))
            unread = reading.chunks_unread(result.doc_tokens, self.settings.agent.chunk_size,
                                           result.exit_chunk is not None)
            return Answered(result.answer, result.prediction, result.n_turns, result.doc_tokens,
                            round(time.perf_counter() - start, 3), self.engine.version, result.chunks_read,
                            unread, result.memory_updates, result.exit_chunk, result.malformed, result.memory)
        finally:
            self.ongoing -= 1

    async def _run(self, question: str, doc: dict) -> Answered:
        await self.sync_version()
        return await self._drive(*self._open(question, doc), doc=doc)

    async def answer(self, req: dict) -> Reply:
        """/v1/answer: the body was validated by the gateway."""
        try:
            out = await self._run(req["question"], req)
        except Exception as e:  # noqa: BLE001 - every failure becomes a one-line reason
            return Reply.failure(e)
        return Reply(out.body(bool(req.get("show_memory"))))

    async def answer_events(self, req: dict) -> AsyncIterator[dict | Reply]:
        """/v1/answer with stream: a `start` event (or, for a request failing its checks, its
        Reply), a `turn` event as each memory turn ends (`kept` for a turn that kept the memory,
        agent.gates), then the `answer` event: the body the unstreamed call returns. Closed early
        (the client left), it cancels the loop."""
        try:
            await self.sync_version()
            loop, reading = self._open(req["question"], req)
        except Exception as e:  # noqa: BLE001
            yield Reply.failure(e)
            return
        yield {"event": "start", "total": reading.total, "unit": reading.unit}
        events: asyncio.Queue = asyncio.Queue()
        start = time.perf_counter()

        def on_turn(progress: AgentResult) -> None:
            if not progress.turns[-1].is_final:
                events.put_nowait(turn_event(progress, reading, time.perf_counter() - start))

        task = asyncio.ensure_future(self._drive(loop, reading, on_turn, req))
        task.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            out = task.result()
        except Exception as e:  # noqa: BLE001 - the stream ends with the reason
            yield Reply.failure(e)
            return
        finally:
            task.cancel()
        yield {"event": "answer", **out.body(bool(req.get("show_memory")))}

    async def answer_row(self, row: dict) -> OutputRow:
        """A batch row -> its output row; a failing document gets its reason in `error`."""
        if row.get("error"):
            return OutputRow.failed(row, row["error"], self.engine.version)
        version = self.engine.version
        try:
            res = await self._run(row["question"], row)
        except Exception as e:  # noqa: BLE001
            return OutputRow.failed(row, Reply.failure(e).error, version)
        return OutputRow.answered(row, res)

    def _chat_plan(self, body: dict) -> chat.ChatPlan:
        return chat.plan(body, self.codec, self.settings.engine.max_model_len, self.settings.serve.chat_max_tokens,
                         self.model, self.engine.version)

    async def chat(self, body: dict) -> Reply:
        """OpenAI chat completion straight to the engine: no memory loop."""
        try:
            p = self._chat_plan(body)
            outs = await asyncio.gather(*(self.engine.generate(r) for r in p.requests()))
        except Exception as e:  # noqa: BLE001
            return Reply.failure(e)
        return Reply(chat.completion(p, outs))

    async def chat_events(self, body: dict) -> AsyncIterator[dict | Reply]:
        """The chat completion as chunks (or first, for a bad body, its Reply); closed early, it
        stops the engine's generations."""
        try:
            p = self._chat_plan(body)
        except Exception as e:  # noqa: BLE001
            yield Reply.failure(e)
            return
        try:
            async with aclosing(chat.chunks(self.engine, p)) as chunks:
                async for c in chunks:
                    yield c
        except Exception as e:  # noqa: BLE001
            yield Reply.failure(e)

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
                self.on_load(model, version)
        return self.info()

    def info(self) -> dict:
        return {"model": self.model, "version": self.engine.version, "pid": os.getpid(),
                "ongoing": self.ongoing, "turns": self.turns}

    async def close(self) -> None:
        await self.engine.close()


def _model_dir(settings: ReplicaSettings, model: str) -> Path:
    """The model's folder on this replica's node: fetched into that node's home (home_dir)."""
    return resolve_model(model, home_dir(settings.home), settings.tracking_uri)


def trace_record(result: AgentResult, doc: dict, model: str, version: int, documents: bool) -> dict:
    """What the app's Tracking deployment turns into an MLflow trace (pipelines/track/traces.py):
    the question, the memory after each chunk turn, each turn's counts, the answer; the document
    by its name (doc_id, uri), its text only when `documents`."""
    steps = [{"prompt_tokens": len(t.prompt_ids), "generated": len(t.response_ids), "seconds": float(t.seconds),
              "gate": t.gate, "final": t.is_final} for t in result.turns]
    named = {k: doc[k] for k in ("doc_id", "uri") if doc.get(k)}
    text = {"document": doc.get("document") or doc.get("context")} if documents else {}
    return {"question": result.question, "memory": list(result.memory), "steps": steps, "answer": result.answer,
            "prediction": result.prediction, "doc_tokens": result.doc_tokens, "model": model, "version": version,
            "document": {**named, **{k: v for k, v in text.items() if v}}}


def turn_event(progress: AgentResult, reading: Reading, elapsed: float) -> dict:
    """After memory turn `turn`: how far into the document (read of total, in unit), the memory
    it wrote (a `kept` event: the memory it kept), its gate (updated, kept, exited), that turn's
    seconds and the seconds since the loop began."""
    gate = progress.turns[-1].gate
    return {"event": "kept" if gate == "kept" else "turn", "turn": len(progress.memory), "gate": gate,
            "tokens_read": progress.doc_tokens, "read": reading.read, "total": reading.total, "unit": reading.unit,
            "memory": progress.memory[-1], "seconds": round(progress.turns[-1].seconds, 3),
            "elapsed": round(elapsed, 3)}
