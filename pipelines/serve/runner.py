"""Runs one batch job: a bounded window of shards, a bounded number of rows in flight.

`answer(row) -> output row` is injected (a Serve handle call with retries in the app,
anything async in tests), so this loop knows nothing of Ray. Memory holds at most
`shards_in_flight` shards of rows, whatever the job's size.
"""

from __future__ import annotations

import asyncio
import time

from pipelines.serve.jobs import (Answer, JobState, count_rows, finished_shards, iter_rows, iter_shards, save_state,
                                  shard_counts, write_shard)
from pipelines.storage import resolve


class JobRunner:
    def __init__(self, state: JobState, answer: Answer, rows_in_flight: int, shards_in_flight: int):
        self.state, self.answer = state, answer
        self.sem = asyncio.Semaphore(rows_in_flight)
        self.shards_in_flight = shards_in_flight

    async def run(self) -> JobState:
        st = self.state
        st.status, st.message = "running", ""
        st.run_done = st.run_tokens = 0
        st.run_seconds = 0.0
        try:
            await asyncio.to_thread(self._count_finished)
            save_state(st)
            await self._shards(set(finished_shards(st.output)))
            st.status = "done"
        except asyncio.CancelledError:
            # Cancelled by request (status already says so), or the app is stopping: resume later.
            if st.status != "cancelled":
                st.status, st.message = "interrupted", "the app stopped; it resumes this job on restart"
            save_state(st)
            raise
        except Exception as e:  # noqa: BLE001 - the job fails with its reason, finished shards stay
            st.status, st.message = "failed", f"{e.__class__.__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        save_state(st)
        return st

    def _count_finished(self) -> None:
        st = self.state
        st.total = count_rows(st.input)
        fs, _ = resolve(st.output)
        st.done = st.errors = st.tokens = 0
        for path in finished_shards(st.output).values():
            rows, errors, tokens = shard_counts(fs, path)
            st.done, st.errors, st.tokens = st.done + rows, st.errors + errors, st.tokens + tokens

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
        st = self.state
        tokens = sum(r["tokens"] or 0 for r in out)
        st.done += len(out)
        st.errors += sum(r["error"] is not None for r in out)
        st.tokens += tokens
        st.run_done += len(out)
        st.run_tokens += tokens
        st.run_seconds = time.perf_counter() - self._start
        await asyncio.to_thread(save_state, st)

    async def _row(self, row: dict) -> dict:
        async with self.sem:
            return await self.answer(row)


async def _first_done(pending: set[asyncio.Task]) -> set[asyncio.Task]:
    done, rest = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
    for task in done:
        task.result()
    return rest
