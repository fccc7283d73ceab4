"""The job manager: one per app, it runs the batch jobs whose states its JobStore holds.

Rows go to the agent replicas through a Serve handle, so a job spreads over all of them;
a row whose replica died is retried on another (backing off while Serve restarts it).
The store's registry lets a restarted app resume every job that was running. A job's
input and output must lie where the app's Access rule allows (serve.allowed_paths); the
job then works on their resolved paths.
"""

from __future__ import annotations

import asyncio
import logging

from pipelines.errors import UserError
from pipelines.serve.access import Access
from pipelines.serve.jobs import input_files
from pipelines.serve.jobstore import JobState, JobStatus, JobStore
from pipelines.serve.runner import JobRunner
from pipelines.serve.schema import OutputRow, Reply, ServeError
from pipelines.serve.state import read_model_state
from pipelines.serve.tracking import job_figures
from pipelines.storage import first_line

log = logging.getLogger(__name__)


def job_slots(replicas: int, per_replica: int, share: float) -> int:
    """Rows all batch jobs may have in flight together: `share` of the replicas' slots, at least one."""
    return max(1, int(replicas * per_replica * share))


class JobManager:
    def __init__(self, answer_row, settings, tracking=None):
        """answer_row: async row -> OutputRow (may raise on infrastructure failure); tracking: the
        app's Tracking deployment handle (each job an MLflow run), None when untracked."""
        self.answer_row, self.cfg, self.settings, self.tracking = answer_row, settings.serve, settings, tracking
        self.access = Access.of(self.cfg.allowed_paths, self.cfg.allowed_s3_prefixes)
        self.store = JobStore(settings.state_dir)
        self.tasks: dict[str, asyncio.Task] = {}
        # every job's rows in flight together (serve.job_share of the replicas' slots)
        self.job_slots = job_slots(self.cfg.replicas, self.cfg.max_ongoing_requests, self.cfg.job_share)
        self.rows = asyncio.Semaphore(self.job_slots)

    async def resume_all(self) -> list[str]:
        """Restart every registered job whose state says it was running when the app stopped."""
        resumed = []
        for entry in await asyncio.to_thread(self.store.entries):
            state = self.store.load(entry["output"]) if self._still_allowed(entry) else None
            if state and not state.status.terminal and state.job_id not in self.tasks:
                self._start(state)
                resumed.append(state.job_id)
        return resumed

    async def submit(self, input_uri: str, output_uri: str) -> Reply:
        try:
            state = await asyncio.to_thread(self._prepare, input_uri, output_uri)
        except UserError as e:
            return Reply.failure(e)
        if self._running(state.job_id):
            return Reply({"job_id": state.job_id, "status": str(JobStatus.RUNNING)}, 202)
        if state.status == JobStatus.DONE:
            self.store.live[state.job_id] = state
            return Reply({"job_id": state.job_id, "status": str(JobStatus.DONE)}, 202)
        self._start(state)
        return Reply({"job_id": state.job_id, "status": str(JobStatus.RUNNING)}, 202)

    def _running(self, job_id: str) -> bool:
        task = self.tasks.get(job_id)
        return task is not None and not task.done()

    def _still_allowed(self, entry: dict) -> bool:
        ok = self.access.allows(entry["input"]) and self.access.allows(entry["output"])
        if not ok:
            log.warning("job %s: not resumed, its input or output is no longer in serve.allowed_paths",
                        entry.get("job_id"))
        return ok

    def _prepare(self, input_uri: str, output_uri: str) -> JobState:
        input_uri, output_uri = self.access.check(input_uri, "input"), self.access.check(output_uri, "output")
        input_files(input_uri)
        state = self.store.open(input_uri, output_uri, self.cfg.shard_rows)
        self.store.register(state)
        return state

    def _start(self, state: JobState) -> None:
        runner = JobRunner(state, self._answer, self.job_slots, self.cfg.shards_in_flight, self.store)
        self.store.live[state.job_id] = state
        self.tasks[state.job_id] = asyncio.get_running_loop().create_task(self._tracked(runner, state))

    async def _tracked(self, runner: JobRunner, state: JobState) -> JobState:
        """runner.run() inside the job's MLflow run (serve/tracking.py), when the app is tracked."""
        if self.tracking is None:
            return await runner.run()
        t = self.tracking
        model, version = read_model_state(self.settings.state_dir) or (self.settings.model, 0)
        job_run = await t.job_started.remote(state.job_id, state.input, state.output, model, version)

        def end(st: JobState, status: str):
            return t.job_ended.remote(job_run, job_figures(st), status)
        runner.on_end = lambda st, failure: end(st, "FINISHED" if failure is None else "FAILED")
        try:
            return await runner.run()
        except asyncio.CancelledError:  # cancelled, or the app is stopping (it resumes as a new run)
            await end(state, "KILLED")
            raise

    async def _answer(self, row: dict) -> OutputRow:
        async with self.rows:
            return await self._answer_held(row)

    async def _answer_held(self, row: dict) -> OutputRow:
        from ray.serve.exceptions import BackPressureError

        attempt, last = 0, None
        while attempt < self.cfg.row_attempts:
            try:
                return await self.answer_row(row)
            except BackPressureError:
                await asyncio.sleep(self.cfg.retry_after_s)
            except Exception as e:  # noqa: BLE001 - a replica died or is restarting: retry elsewhere
                attempt, last = attempt + 1, e
                log.warning("row %s: attempt %d failed: %s", row.get("id"), attempt, first_line(e))
                await asyncio.sleep(min(30.0, 2.0 ** attempt))
        return OutputRow.failed(row, f"failed after {attempt} attempts: {last.__class__.__name__}: {first_line(last)}")

    async def status(self, job_id: str) -> Reply:
        state = await asyncio.to_thread(self.store.get, job_id)
        if state is None:
            return Reply.failure(ServeError(f"job '{job_id}': unknown", 404))
        return Reply(state.public())

    async def cancel(self, job_id: str) -> Reply:
        if job_id not in self.store.live:
            return await self.status(job_id)
        state = self.store.live[job_id]
        if self._running(job_id):
            state.cancel()
            task = self.tasks[job_id]
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return Reply(state.public())

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
