"""Batch job state with one owner: the status a job is in, its counters, and where both live.

A job's state is `_job.json` next to its output (the truth: a restarted app resumes from
it); a registry entry per job under the app's state folder finds that output from a job
id. Only JobState's methods change a state, and only JobStore reads or writes one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum

import pyarrow.fs as pafs

from pipelines.serve.jobs import ShardCounts, job_id_for
from pipelines.serve.schema import ServeError
from pipelines.serve.state import join, read_json, write_json
from pipelines.storage import first_line, resolve

STATE_FILE = "_job.json"


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the app stopped mid-job; it resumes the job on restart

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass
class JobState:
    job_id: str
    input: str
    output: str
    shard_rows: int
    status: JobStatus = JobStatus.QUEUED
    total: int | None = None
    done: int = 0
    errors: int = 0
    tokens: int = 0
    # the gates' sums over the job's rows (jobs.ShardCounts); a state saved before them loads with 0
    chunks_read: int = 0
    chunks_unread: int = 0
    memory_updates: int = 0
    malformed: int = 0
    message: str = ""
    run_done: int = 0  # this run's share (a resumed job's rate counts only what it did itself)
    run_tokens: int = 0
    run_seconds: float = 0.0
    updated: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.status = JobStatus(self.status)

    def start(self) -> None:
        self.status, self.message = JobStatus.RUNNING, ""
        self.run_done = self.run_tokens = 0
        self.run_seconds = 0.0

    def recount(self, total: int, shards: Iterator[ShardCounts]) -> None:
        """Counters from the finished shards, not from the last save: each shard counts once
        however often the job was stopped and resumed."""
        self.total = total
        for name in JOB_COUNTERS.values():
            setattr(self, name, 0)
        for counts in shards:
            self._add(counts)

    def add_shard(self, counts: ShardCounts, run_seconds: float) -> None:
        self._add(counts)
        self.run_done, self.run_tokens = self.run_done + counts.rows, self.run_tokens + counts.tokens
        self.run_seconds = run_seconds

    def _add(self, counts: ShardCounts) -> None:
        for key, name in JOB_COUNTERS.items():
            setattr(self, name, getattr(self, name) + getattr(counts, key))

    def finish(self) -> None:
        self.status = JobStatus.DONE

    def fail(self, err: BaseException) -> None:
        reason = str(err).splitlines()[0] if str(err) else ""
        self.status, self.message = JobStatus.FAILED, f"{err.__class__.__name__}: {reason}"

    def cancel(self) -> None:
        self.status, self.message = JobStatus.CANCELLED, "cancelled by request"

    def interrupt(self, message: str = "the app stopped; it resumes this job on restart") -> None:
        """The run stopped without a request to (the app is stopping): resumable, unless cancelled."""
        if self.status != JobStatus.CANCELLED:
            self.status, self.message = JobStatus.INTERRUPTED, message

    def public(self) -> dict:
        secs = max(self.run_seconds, 1e-9)
        return {"job_id": self.job_id, "status": str(self.status), "done": self.done, "total": self.total,
                "errors": self.errors, "tokens": self.tokens, "input": self.input, "output": self.output,
                "documents_per_s": round(self.run_done / secs, 4), "tokens_per_s": round(self.run_tokens / secs, 2),
                "message": self.message}


# each ShardCounts field -> the JobState counter that sums it over the job's finished shards
JOB_COUNTERS = {f.name: "done" if f.name == "rows" else f.name for f in fields(ShardCounts)}
_SAVE_LOCK = threading.Lock()


class JobStore:
    def __init__(self, state_dir: str | None = None):
        """state_dir: where the registry lives (None: states next to outputs only)."""
        self.state_dir = state_dir
        self.live: dict[str, JobState] = {}  # jobs this process has loaded or started

    def load(self, output: str) -> JobState | None:
        data = read_json(join(output, STATE_FILE))
        return JobState(**data) if data else None

    def open(self, input_uri: str, output_uri: str, shard_rows: int) -> JobState:
        """The job from input to output: the state saved at the output (to resume), else a new
        one, saved there now. An output holding another job's results is refused (409)."""
        job_id = job_id_for(input_uri, output_uri)
        state = self.load(output_uri)
        if state and state.job_id != job_id:
            raise ServeError(f"output '{output_uri}': holds the results of another job (input "
                             f"'{state.input}')", 409)
        if state is None:
            state = JobState(job_id, input_uri, output_uri, shard_rows)
            try:
                self.save(state)
            except OSError as e:
                raise ServeError(f"output '{output_uri}': not writable ({first_line(e)})", 400) from None
        return state

    def save(self, state: JobState) -> None:
        """Saves are serialized and snapshot the state under the lock, so the last write is the newest."""
        with _SAVE_LOCK:
            state.updated = time.time()
            write_json(join(state.output, STATE_FILE), asdict(state))

    def register(self, state: JobState) -> None:
        """A registry entry, so a restarted app finds the job by id."""
        if self.state_dir is not None:
            write_json(self._entry(state.job_id), {"job_id": state.job_id, "input": state.input,
                                                  "output": state.output})

    def get(self, job_id: str) -> JobState | None:
        if job_id in self.live:
            return self.live[job_id]
        entry = read_json(self._entry(job_id)) if _safe(job_id) and self.state_dir is not None else None
        return self.load(entry["output"]) if entry else None

    def entries(self) -> list[dict]:
        """Every registered job's {job_id, input, output}."""
        if self.state_dir is None:
            return []
        fs, root = resolve(self._entry(""))
        infos = fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
        found = (read_json(self._entry(i.base_name.removesuffix(".json"))) for i in infos
                 if i.base_name.endswith(".json"))
        return [e for e in found if e]

    def _entry(self, job_id: str) -> str:
        return join(self.state_dir, "jobs", f"{job_id}.json" if job_id else "")


def _safe(job_id: str) -> bool:
    return job_id.isalnum() and len(job_id) <= 64
