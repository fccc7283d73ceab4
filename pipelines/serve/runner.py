"""Runs one batch job: a bounded window of shards, a bounded number of rows in flight.

`answer(row) -> OutputRow` is injected (a Serve handle call with retries in the app,
anything async in tests), so this loop knows nothing of Ray. Memory holds at most
`shards_in_flight` shards of rows, whatever the job's size.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pipelines.serve.jobs import (Answer, ShardCounts, count_rows, finished_shards, iter_rows, iter_shards,
                                  shard_counts, write_shard)
from pipelines.serve.jobstore import JobState, JobStore
from pipelines.serve.schema import OutputRow
from pipelines.storage import resolve


class JobRunner:
    def __init__(self, state: JobState, answer: Answer, rows_in_flight: int, shards_in_flight: int,
                 store: JobStore | None = None):
        self.state, self.answer = state, answer
        self.store = store or JobStore()
        self.sem = asyncio.Semaphore(rows_in_flight)
        self.shards_in_flight = shards_in_flight
        # awaited with (state, failure or None) before the state says done or failed, so whoever
        # waits for that status finds what the hook records (the job's MLflow run) complete
        self.on_end: Callable[[JobState, Exception | None], Awaitable[None]] | None = None

    async def run(self) -> JobState:
        st = self.state
        st.start()
        try:
            await asyncio.to_thread(self._count_finished)
            self.store.save(st)
            await self._shards(set(finished_shards(st.output)))
            failure = None
        except asyncio.CancelledError:
            st.interrupt()  # cancelled by request (the status says so), or the app is stopping: resume later
            self.store.save(st)
            raise
        except Exception as e:  # noqa: BLE001 - the job fails with its reason, finished shards stay
            failure = e
        if self.on_end is not None:
            await self.on_end(st, failure)
        if failure is None:
            st.finish()
        else:
            st.fail(failure)
        self.store.save(st)
        return st

    def _count_finished(self) -> None:
        st = self.state
        fs, _ = resolve(st.output)
        st.recount(count_rows(st.input), (shard_counts(fs, p) for p in finished_shards(st.output).values()))

    async def _shards(self, skip: set[int]) -> None:
        rows = iter_shards(iter_rows(self.state.input), self.state.shard_rows)
        pending: set[asyncio.Task] = set()
        self._start = time.perf_counter()
        try:
            while (item := await asyncio.to_thread(next, rows, None)) is not None:
                k, shard = item
                if k in skip:
                    continue
                while len(pending) >= self.shards_in_flight:
                    pending = await _first_done(pending)
                pending.add(asyncio.create_task(self._shard(k, shard)))
            while pending:
                pending = await _first_done(pending)
        finally:
            for task in pending:
                task.cancel()

    async def _shard(self, k: int, rows: list[dict]) -> None:
        out = await asyncio.gather(*(self._row(r) for r in rows))
        await asyncio.to_thread(write_shard, self.state.output, k, out)
        self.state.add_shard(ShardCounts.of_rows(out), time.perf_counter() - self._start)
        await asyncio.to_thread(self.store.save, self.state)

    async def _row(self, row: dict) -> OutputRow:
        async with self.sem:
            return await self.answer(row)


async def _first_done(pending: set[asyncio.Task]) -> set[asyncio.Task]:
    done, rest = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()
    return rest
