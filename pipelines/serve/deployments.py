"""Thin Ray Serve wrappers: the agent replicas (one engine each), the job manager, and the
app's MLflow recorder (serve/tracking.py; absent when tracking is off).

The `*_events` methods are async generators: callers use `handle.options(stream=True)`, and a
caller that goes away (the HTTP client disconnected) cancels them, which ends the work.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import aclosing

from ray import serve

from pipelines.serve.manager import JobManager
from pipelines.serve.replica import AgentCore, ReplicaSettings
from pipelines.serve.schema import OutputRow, Reply
from pipelines.serve.tracking import ServeTracking


@serve.deployment(name="Tracking", num_replicas=1)
class Tracking:
    def __init__(self, tracker, app: str, tags: dict[str, str]):
        self.core = ServeTracking(tracker, app, tags)

    def loaded(self, ref: str, version: int, replica: str) -> None:
        self.core.loaded(ref, version, replica)

    def job_started(self, job_id: str, input_uri: str, output: str, model: str, version: int) -> str | None:
        return self.core.job_started(job_id, input_uri, output, model, version)

    def job_ended(self, job_run: str | None, figures: dict[str, float], status: str) -> None:
        self.core.job_ended(job_run, figures, status)

    def trace(self, record: dict) -> None:
        self.core.trace(record)

    def __del__(self):
        self.core.close()


@serve.deployment(name="Agent")
class Agent:
    async def __init__(self, settings: ReplicaSettings, tracking=None):
        # The engine is built on the replica's event loop, where its requests will run.
        self.core = AgentCore.create(settings)
        if tracking is not None:  # each load is recorded, fire and forget (kept until sent)
            replica, self._records = serve.get_replica_context().replica_id.unique_id, set()

            def on_load(model: str, version: int) -> None:
                task = asyncio.ensure_future(tracking.loaded.remote(model, version, replica))
                self._records.add(task)
                task.add_done_callback(self._records.discard)
            self.core.on_load = on_load
            on_load(self.core.model, self.core.engine.version)
            if settings.serve.trace_sample > 0:
                def on_trace(record: dict) -> None:
                    task = asyncio.ensure_future(tracking.trace.remote(record))
                    self._records.add(task)
                    task.add_done_callback(self._records.discard)
                self.core.on_trace = on_trace

    async def answer(self, req: dict) -> Reply:
        return await self.core.answer(req)

    async def answer_events(self, req: dict) -> AsyncIterator[dict | Reply]:
        async with aclosing(self.core.answer_events(req)) as events:
            async for event in events:
                yield event

    async def answer_row(self, row: dict) -> OutputRow:
        return await self.core.answer_row(row)

    async def chat(self, body: dict) -> Reply:
        return await self.core.chat(body)

    async def chat_events(self, body: dict) -> AsyncIterator[dict | Reply]:
        async with aclosing(self.core.chat_events(body)) as chunks:
            async for chunk in chunks:
                yield chunk

    async def resolve(self, model: str) -> Reply:
        return await self.core.resolve(model)

    async def reload(self, model: str, version: int) -> dict:
        return await self.core.reload(model, version)

    async def info(self) -> dict:
        await self.core.sync_version()
        return self.core.info()

    async def __del__(self):
        await self.core.close()


@serve.deployment(name="Jobs", num_replicas=1)
class Jobs:
    async def __init__(self, agent, settings: ReplicaSettings, tracking=None):
        self.manager = JobManager(lambda row: agent.answer_row.remote(row), settings, tracking)
        self._resume = asyncio.get_running_loop().create_task(self.manager.resume_all())

    async def submit(self, input_uri: str, output_uri: str) -> Reply:
        return await self.manager.submit(input_uri, output_uri)

    async def status(self, job_id: str) -> Reply:
        return await self.manager.status(job_id)

    async def cancel(self, job_id: str) -> Reply:
        return await self.manager.cancel(job_id)

    def info(self) -> dict:
        return {"pid": os.getpid(), "jobs": len(self.manager.store.live)}

    async def __del__(self):
        await self.manager.close()
