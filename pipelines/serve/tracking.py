"""Serve in MLflow, beside the training and evaluation runs of the same experiment.

Each deployment of the app is a run (tag `command=serve`) that records every model version a
replica loads: one point of `serve/model_version` per load (at its time; the registry's
VERSION of a `models:/NAME/VERSION`, else the weights version, 0 at start and one up per
reload), tag `serving` the reference loaded last, tag `replica.ID` what each replica serves.
Each batch job is a run nested under it (`command=batch`: tags input, output, model,
model_version; metrics serve/documents, serve/failed, serve/documents_per_s,
serve/tokens_per_s, gate/update_rate, gate/exit_fraction, gate/malformed; FINISHED, FAILED, or
KILLED when cancelled or the app stopped mid-job: the resumed job is a new run, and a start left
RUNNING by a killed app is marked KILLED).

MLflow's client never runs inside an agent replica or the job manager (its imports and a
sqlite lock would stall their event loops): this class lives in the app's own `Tracking`
deployment (deployments.py), which opens the deployment run when it starts and ends it when
the app shuts down; answers sampled at serve.trace_sample reach it as plain records and become
MLflow traces of the deployment run (no document text unless serve.trace_documents). Tracking
never fails serving: an MLflow error is logged and dropped.
"""

from __future__ import annotations

import logging
import time

from pipelines.rollout.metrics import gate_rates
from pipelines.serve.follow import served_version
from pipelines.track.metrics import (SERVE_DOCUMENTS, SERVE_DOCUMENTS_PER_S, SERVE_FAILED, SERVE_MODEL_VERSION,
                                     SERVE_TOKENS_PER_S)

log = logging.getLogger("memagent.serve")


def job_figures(state) -> dict[str, float]:
    """What a batch job's run records at its end: its JobState's counters, this run's rates, and
    the gates' metrics over every row of the job (rollout.metrics.gate_rates, the training's)."""
    pub = state.public()
    return {SERVE_DOCUMENTS: pub["done"], SERVE_FAILED: pub["errors"],
            SERVE_DOCUMENTS_PER_S: pub["documents_per_s"], SERVE_TOKENS_PER_S: pub["tokens_per_s"],
            **gate_rates(state.chunks_read, state.chunks_unread, state.memory_updates, state.malformed)}


def kill_stale(tracker, filter_string: str) -> None:
    """Runs left RUNNING by an app or job that was killed (an MlflowTracker's): they ended there."""
    client = tracker.client
    for r in client.search_runs([tracker.experiment_id()], f"{filter_string} and attributes.status = 'RUNNING'"):
        client.set_terminated(r.info.run_id, "KILLED")


def job_filter(job_id: str) -> str:
    """The runs of one batch job, whichever runner ran it."""
    return f"tags.command = 'batch' and tags.job_id = '{job_id}'"


class ServeTracking:
    def __init__(self, tracker, app: str, tags: dict[str, str]):
        """tracker: an MlflowTracker (its URI, experiment and artifact location); tags: the
        deployment run's (model, replicas, git commit)."""
        self.tracker, self.app = tracker, app
        self.run_id = self._safe("open the deployment run", lambda: self._open(tags))

    def _open(self, tags: dict[str, str]) -> str:
        client, exp = self.tracker.client, self.tracker.experiment_id()
        kill_stale(self.tracker, f"tags.command = 'serve' and tags.app = '{self.app}'")
        tags = {**tags, "command": "serve", "app": self.app}
        name = tags.get("stage") or f"serve-{self.app}"  # a pipeline's stage (tracker.parent_tags)
        return client.create_run(exp, run_name=name, tags=tags).info.run_id

    def loaded(self, ref: str, version: int, replica: str) -> None:
        """A replica now serves `ref` with weights version `version`."""
        if self.run_id is None:
            return
        registered = served_version(ref)
        value = version if registered is None else registered

        def record():
            client = self.tracker.client
            client.log_batch(self.run_id, metrics=_metrics({SERVE_MODEL_VERSION: value}))
            client.set_tag(self.run_id, "serving", ref)
            client.set_tag(self.run_id, f"replica.{replica}", f"{ref} (weights v{version})")
        self._safe(f"record the load of {ref}", record)

    def job_started(self, job_id: str, input_uri: str, output: str, model: str, version: int) -> str | None:
        """The nested run of this (re)start of a batch job."""
        if self.run_id is None:
            return None

        def start() -> str:
            kill_stale(self.tracker, job_filter(job_id))
            tags = {"command": "batch", "mlflow.parentRunId": self.run_id, "job_id": job_id, "input": input_uri,
                    "output": output, "model": model, "model_version": str(version)}
            return self.tracker.client.create_run(self.tracker.experiment_id(), run_name=f"batch-{job_id}",
                                                  tags=tags).info.run_id
        run_id = self._safe(f"start the run of job {job_id}", start)
        if run_id is not None:
            self._safe(f"log the input of job {job_id}", lambda: log_input(self.tracker.client, run_id, input_uri))
        return run_id

    def job_ended(self, job_run: str | None, figures: dict[str, float], status: str) -> None:
        """status: FINISHED, FAILED or KILLED."""
        if job_run is None:
            return

        def end():
            self.tracker.client.log_batch(job_run, metrics=_metrics(figures))
            self.tracker.client.set_terminated(job_run, status)
        self._safe(f"end run {job_run}", end)

    def trace(self, record: dict) -> None:
        """A sampled answer (replica.trace_record) as an MLflow trace of the deployment run."""
        if self.run_id is None:
            return
        from pipelines.track.traces import TraceSpec, turn_spans, write_traces

        spans = turn_spans(record["memory"], record["steps"], record["prediction"], record["answer"])
        tags = {"source": "serve", "app": self.app, "model": record["model"], "model_version": str(record["version"]),
                **{f"document.{k}": str(v) for k, v in record["document"].items() if k != "document"}}
        inputs = {"question": record["question"], **({"document": record["document"]["document"]}
                                                     if "document" in record["document"] else {})}
        spec = TraceSpec(f"serve {self.app}", inputs, {"prediction": record["prediction"], "answer": record["answer"],
                                                       "doc_tokens": record["doc_tokens"]}, spans, tags)
        self._safe("record a trace", lambda: write_traces(self.tracker.uri, self.tracker.experiment_id(),
                                                          self.run_id, [spec]))

    def close(self) -> None:
        if self.run_id is not None:
            self._safe("end the deployment run", lambda: self.tracker.client.set_terminated(self.run_id, "FINISHED"))
            self.run_id = None

    def _safe(self, what: str, call):
        try:
            return call()
        except Exception as e:  # noqa: BLE001 - tracking must not fail serving
            log.warning("serve: could not %s in MLflow (%s)", what, e)
            return None


def log_input(client, run_id: str, input_uri: str) -> None:
    """The job's input rows, a `batch-input` dataset of its run (none if they cannot be listed)."""
    from pipelines.track.datasets import BATCH_INPUT, DatasetRef, dataset_input

    found = dataset_input(DatasetRef(input_uri, BATCH_INPUT, "input"))
    if found is not None:
        client.log_inputs(run_id, datasets=[found])


def _metrics(values: dict[str, float]):
    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    return [Metric(k, float(v), now, 0) for k, v in values.items()]
