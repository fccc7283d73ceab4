"""`memagent batch --runner data`: a batch job as a Ray Data pipeline, without the Serve app.

    memagent batch --runner data --input s3://corpus/questions/ --output s3://corpus/answers/ --store s3://corpus/store

For millions of documents where no interactive endpoint is needed. It is the Serve runner's job
(same input rows, shards, output columns and `_job.json`; every row answered by the same
serve.replica.AgentCore, so error rows carry the same reasons) with another transport: the input
is planned into shards on the driver (shards.py), and `map_batches` hands each shard to a fixed
actor pool, one engine per actor, as `ray.data.llm` does. An actor works on serve.shards_in_flight
shards at once, the memory loops of their rows interleaved on its engine (at most
serve.max_ongoing_requests at a time), and writes each shard whole. The pool is sized by the
app's keys: serve.replicas actors, each placed as a replica is (serve.replica_cpus, ...).

Run again with the same input and output, it skips the shards written (by either runner). Each
(re)start is an MLflow run (command=batch, runner=data) with the app's job metrics; its rates
span the time this run's shards were being answered (engine start-up excluded, as it is from
the app's jobs, whose replicas are up before the job).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import asdict

import pyarrow as pa

from pipelines import runtime
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.serve.jobs import ShardCounts, finished_shards, input_files, shard_counts, write_shard
from pipelines.serve.jobstore import JobState, JobStatus, JobStore
from pipelines.serve.replica import AgentCore, ReplicaSettings
from pipelines.serve.settings import check_store, replica_options, replica_settings, with_allowed
from pipelines.serve.schema import OutputRow
from pipelines.serve.shards import Shard, plan, read
from pipelines.storage import absolute_uri, resolve

log = logging.getLogger("memagent.serve")


class ShardAnswerer:
    """Ray Data's callable class: one engine per actor; a call answers one shard and writes it.
    `__call__` is a coroutine, so Ray Data runs every call of an actor on one event loop, where
    the engine's requests from all its shards meet."""

    def __init__(self, settings: ReplicaSettings, input_uri: str, output_uri: str):
        self.core = AgentCore.create(settings)
        self.input, self.output = input_uri, output_uri
        self.loops = asyncio.Semaphore(settings.serve.max_ongoing_requests)

    async def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.Table.from_pylist([await self.shard(Shard.from_record(r)) for r in batch.to_pylist()])

    async def shard(self, shard: Shard) -> dict:
        started = time.time()
        rows = await asyncio.to_thread(read, self.input, shard)
        out = await asyncio.gather(*(self._row(r) for r in rows))
        await asyncio.to_thread(write_shard, self.output, shard.k, out)
        return {"k": shard.k, **asdict(ShardCounts.of_rows(out)), "started": started, "ended": time.time()}

    async def _row(self, row: dict) -> OutputRow:
        async with self.loops:
            return await self.core.answer_row(row)


def main(cfg: Config, input_uri: str, output_uri: str) -> dict:
    """Run the job, or resume it; its status as the app reports a job's (JobState.public)."""
    input_uri, output_uri = absolute_uri(input_uri), absolute_uri(output_uri)
    input_files(input_uri)  # a missing or unreadable input fails before anything is written
    cfg = with_allowed(cfg, input_uri, output_uri)
    store = JobStore()
    state = store.open(input_uri, output_uri, cfg.serve.shard_rows)
    if state.status != JobStatus.DONE:
        run(cfg, store, state)
    return state.public()


def run(cfg: Config, store: JobStore, state: JobState) -> None:
    from pipelines.progress import Progress
    from pipelines.track.tracker import create_tracker

    settings = actor_settings(cfg)
    pending = _start(store, state)
    tracker = create_tracker(cfg)
    with (job_run(tracker, cfg, state, settings.model),
          Progress(f"job {state.job_id}", total=state.total, unit="row") as bar):
        bar.set(state.done, errors=state.errors)
        try:
            first, last = float("inf"), 0.0
            for r in answered(cfg, settings, state, pending):
                first, last = min(first, r["started"]), max(last, r["ended"])
                state.add_shard(ShardCounts.from_record(r), last - first)
                store.save(state)
                bar.set(state.done, errors=state.errors, **{"tok/s": state.public()["tokens_per_s"]})
        except KeyboardInterrupt:
            state.interrupt("stopped; the same command resumes it")
            raise
        except Exception as e:  # noqa: BLE001 - the job fails with its reason; finished shards stay
            state.fail(e)
            raise UserError(f"job {state.job_id}: failed ({state.message})") from None
        finally:
            _record(tracker, store, state)
    state.finish()
    store.save(state)


def _start(store: JobStore, state: JobState) -> list[Shard]:
    """The plan's shards not written yet; the counters recounted from those that are."""
    shards = list(plan(state.input, state.shard_rows))  # one small record a shard
    done = finished_shards(state.output)
    fs, _ = resolve(state.output)
    state.start()
    state.recount(sum(s.rows for s in shards), (shard_counts(fs, p) for p in done.values()))
    store.save(state)
    return [s for s in shards if s.k not in done]


def _record(tracker, store: JobStore, state: JobState) -> None:
    from pipelines.serve.tracking import job_figures

    store.save(state)
    tracker.log_metrics(job_figures(state))


def answered(cfg: Config, settings: ReplicaSettings, state: JobState, shards: list[Shard]) -> Iterator[dict]:
    """Each shard's counts as its actor finishes it: the Ray Data pipeline, streamed."""
    if not shards:
        return
    import ray

    with runtime.session(log_to_driver=False, local_cpus=os.cpu_count(), importable=False):
        ctx = ray.data.DataContext.get_current()
        ctx.enable_progress_bars = False
        s = cfg.serve
        actors, at_once = min(s.replicas, len(shards)), s.shards_in_flight
        ds = ray.data.from_items([sh.record() for sh in shards], override_num_blocks=len(shards))
        ds = ds.map_batches(
            ShardAnswerer, batch_size=1, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=at_once,
                                               max_concurrent_calls_per_actor=at_once),
            fn_constructor_kwargs={"settings": settings, "input_uri": state.input, "output_uri": state.output},
            **actor_options(cfg))
        yield from ds.iter_rows()


def actor_options(cfg: Config) -> dict:
    """Placed as an agent replica is (serve.replica_cpus, its GPUs and resources), with the same
    environment from the driver."""
    return replica_options(cfg, runtime.worker_env())


def actor_settings(cfg: Config) -> ReplicaSettings:
    """What each actor's AgentCore needs: the app's settings without a state folder (nothing to
    follow), the model pinned here, so that every actor serves the same version."""
    from pipelines.models import check_remote_ref
    from pipelines.serve.follow import pin
    from pipelines.track.tracker import default_tracking_uri

    check_store(cfg)
    model = pin(check_remote_ref(cfg.model.path, "model"), default_tracking_uri(cfg.home_path, cfg.track))
    return replica_settings(cfg, model, "")


@contextlib.contextmanager
def job_run(tracker, cfg: Config, state: JobState, model: str) -> Iterator[None]:
    """This (re)start's MLflow run; a start of the same job left RUNNING by a killed process is
    marked KILLED first. Tracking never fails the job."""
    from pipelines.serve.tracking import job_filter, kill_stale
    from pipelines.track.datasets import BATCH_INPUT, DatasetRef
    from pipelines.track.tracker import MlflowTracker, command_run, stage

    if isinstance(tracker, MlflowTracker):
        try:
            kill_stale(tracker, job_filter(state.job_id))
        except Exception as e:  # noqa: BLE001
            log.warning("batch: could not close stale runs of job %s in MLflow (%s)", state.job_id, e)
    tags = {"runner": "data", "job_id": state.job_id, "input": state.input, "output": state.output,
            "model": model, "model_version": "0"}
    with stage(f"batch-{state.job_id}"), command_run(tracker, cfg, "batch", tags=tags):
        tracker.log_datasets([DatasetRef(state.input, BATCH_INPUT, "input")])
        yield
