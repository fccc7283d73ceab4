"""A batch job as an MLflow run (command `batch`), beside the training and evaluation runs of the
same experiment: tags name the job, its input and output and the model version the replicas
served when it started; at its end the run holds rows done, errors, documents/s and tokens/s,
and finishes FINISHED, FAILED or KILLED (interrupted: it resumes as a new run). Tracking never
fails a job: an MLflow error is logged and the job goes on."""

from __future__ import annotations

import logging
import time

from pipelines.serve.jobstore import JobState, JobStatus
from pipelines.track.metrics import SERVE_DOCUMENTS, SERVE_DOCUMENTS_PER_S, SERVE_FAILED, SERVE_TOKENS_PER_S

log = logging.getLogger(__name__)
END = {JobStatus.DONE: "FINISHED", JobStatus.FAILED: "FAILED"}


class JobRun:
    def __init__(self, tracking_uri: str, experiment: str):
        self.uri, self.experiment = tracking_uri, experiment

    def _client(self):
        from mlflow import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def start(self, state: JobState, model: dict) -> str | None:
        """The run of this (re)start of the job; model: the replicas' info (model, version)."""
        try:
            client = self._client()
            found = client.get_experiment_by_name(self.experiment)
            exp = found.experiment_id if found else client.create_experiment(self.experiment)
            tags = {"command": "batch", "job_id": state.job_id, "input": state.input, "output": state.output,
                    "model": str(model.get("model")), "model_version": str(model.get("version"))}
            return client.create_run(exp, run_name=f"batch-{state.job_id}", tags=tags).info.run_id
        except Exception as e:  # noqa: BLE001 - tracking must not fail the job
            log.warning("job %s: no MLflow run (%s)", state.job_id, e)
            return None

    def end(self, run_id: str | None, state: JobState) -> None:
        if run_id is None:
            return
        try:
            from mlflow.entities import Metric

            pub, now = state.public(), int(time.time() * 1000)
            values = {SERVE_DOCUMENTS: pub["done"], SERVE_FAILED: pub["errors"],
                      SERVE_DOCUMENTS_PER_S: pub["documents_per_s"], SERVE_TOKENS_PER_S: pub["tokens_per_s"]}
            client = self._client()
            client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in values.items()])
            client.set_terminated(run_id, END.get(state.status, "KILLED"))
        except Exception as e:  # noqa: BLE001
            log.warning("job %s: MLflow run %s not closed (%s)", state.job_id, run_id, e)
