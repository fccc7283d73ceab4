"""The job manager: one per app, it owns the running batch jobs and their registry.

Rows go to the agent replicas through a Serve handle, so a job spreads over all of them;
a row whose replica died is retried on another (backing off while Serve restarts it).
A registry entry per job under the state folder lets a restarted app resume every job
that was running. A job's input and output must lie where the app's Access rule allows
(serve.allowed_paths); the job then works on their resolved paths.
"""

from __future__ import annotations

import asyncio
import logging

from pipelines.errors import UserError
from pipelines.serve.access import Access
from pipelines.serve.jobs import JobState, input_files, job_id_for, load_state, save_state
from pipelines.serve.runner import JobRunner
from pipelines.serve.schema import ServeError
from pipelines.serve.state import join, read_json, write_json
from pipelines.storage import first_line, resolve

log = logging.getLogger(__name__)


class JobManager:
    def __init__(self, answer_row, settings):
        """answer_row: async row -> output row (may raise on infrastructure failure)."""
        self.answer_row, self.cfg, self.state_dir = answer_row, settings.serve, settings.state_dir
        self.access = Access.of(self.cfg.allowed_paths, self.cfg.allowed_s3_prefixes)
        self.jobs: dict[str, tuple[JobState, asyncio.Task | None]] = {}

    def _registry(self, job_id: str = "") -> str:
        return join(self.state_dir, "jobs", f"{job_id}.json" if job_id else "")

    async def resume_all(self) -> list[str]:
        """Restart every registered job whose state says it was running when the app stopped."""
        fs, root = resolve(self._registry())
        import pyarrow.fs as pafs

        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        resumed = []
        for info in infos:
            entry = read_json(join(self._registry(), info.base_name)) if info.base_name.endswith(".json") else None
            state = load_state(entry["output"]) if entry and self._still_allowed(entry) else None
            if state and state.status in ("queued", "running", "interrupted") and state.job_id not in self.jobs:
                self._start(state)
                resumed.append(state.job_id)
        return resumed

    async def submit(self, input_uri: str, output_uri: str) -> dict:
        try:
            state = await asyncio.to_thread(self._prepare, input_uri, output_uri)
        except UserError as e:
            return ServeError(str(e), getattr(e, "status", 400)).as_dict()
        running = self.jobs.get(state.job_id)
        if running and running[1] is not None and not running[1].done():
            return {"job_id": state.job_id, "status": "running"}
        if state.status == "done":
            self.jobs[state.job_id] = (state, None)
            return {"job_id": state.job_id, "status": "done"}
        self._start(state)
        return {"job_id": state.job_id, "status": "running"}

    def _still_allowed(self, entry: dict) -> bool:
        ok = self.access.allows(entry["input"]) and self.access.allows(entry["output"])
        if not ok:
            log.warning("job %s: not resumed, its input or output is no longer in serve.allowed_paths",
                        entry.get("job_id"))
        return ok

    def _prepare(self, input_uri: str, output_uri: str) -> JobState:
        input_uri, output_uri = self.access.check(input_uri, "input"), self.access.check(output_uri, "output")
        input_files(input_uri)
        job_id = job_id_for(input_uri, output_uri)
        state = load_state(output_uri)
        if state and state.job_id != job_id:
            raise ServeError(f"output '{output_uri}': holds the results of another job (input "
                             f"'{state.input}')", 409)
        if state is None:
            state = JobState(job_id, input_uri, output_uri, self.cfg.shard_rows)
            try:
                save_state(state)
            except OSError as e:
                raise ServeError(f"output '{output_uri}': not writable ({first_line(e)})", 400) from None
        write_json(self._registry(job_id), {"job_id": job_id, "input": input_uri, "output": output_uri})
        return state

    def _start(self, state: JobState) -> None:
        rows_in_flight = self.cfg.replicas * self.cfg.max_ongoing_requests
        runner = JobRunner(state, self._answer, rows_in_flight, self.cfg.shards_in_flight)
        self.jobs[state.job_id] = (state, asyncio.get_running_loop().create_task(runner.run()))

    async def _answer(self, row: dict) -> dict:
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
        return {"id": row["id"], "question": row.get("question"), "doc_id": row.get("doc_id"), "answer": None,
                "prediction": None, "memory": None, "turns": 0, "tokens": 0, "seconds": 0.0,
                "model_version": None,
                "error": f"failed after {attempt} attempts: {last.__class__.__name__}: {first_line(last)}"}

    async def status(self, job_id: str) -> dict:
        if job_id in self.jobs:
            return self.jobs[job_id][0].public()
        entry = await asyncio.to_thread(read_json, self._registry(job_id)) if _safe(job_id) else None
        state = await asyncio.to_thread(load_state, entry["output"]) if entry else None
        if state is None:
            return ServeError(f"job '{job_id}': unknown", 404).as_dict()
        return state.public()

    async def cancel(self, job_id: str) -> dict:
        if job_id not in self.jobs:
            return await self.status(job_id)
        state, task = self.jobs[job_id]
        if task is not None and not task.done():
            state.status, state.message = "cancelled", "cancelled by request"
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return state.public()

    async def close(self) -> None:
        for _, task in self.jobs.values():
            if task is not None:
                task.cancel()


def _safe(job_id: str) -> bool:
    return job_id.isalnum() and len(job_id) <= 64
