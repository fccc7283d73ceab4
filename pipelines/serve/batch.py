"""What `memagent batch` (serve/command.py) runs: submit a batch QA job and follow it with a progress bar.

    memagent batch --input questions.jsonl --output results/ --server http://127.0.0.1:8000
    memagent batch --input s3://bucket/q.parquet --output s3://bucket/answers/   # starts the app here
    memagent batch --runner data --input s3://bucket/q/ --output s3://bucket/answers/ --store s3://bucket/store

Input rows: `question` and one of `document` (or `context`), `doc_id`, `uri`; optional `id`.
Without --server the same app starts in this process (same code path), runs the job, and
stops; that app may also read the input and write the output named here (rows' `uri`s
still need serve.allowed_paths). Running it again with the same input and output resumes
from finished shards. `--runner data` runs the same job as a Ray Data pipeline instead, with no
app (pipelines/serve/datarunner.py): same output, and either runner resumes the other's.
"""

from __future__ import annotations

import os
import time

from pipelines import runtime
from pipelines.config import Config
from pipelines.errors import UserError
from pipelines.serve.jobstore import JobStatus
from pipelines.storage import absolute_uri


class Client:
    """The few HTTP calls a batch needs, with the token from the environment."""

    def __init__(self, url: str, token: str | None, timeout: float = 60.0):
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)
        self.url = url

    def call(self, method: str, path: str, **kwargs) -> dict:
        import httpx

        try:
            r = self.http.request(method, path, **kwargs)
        except httpx.HTTPError as e:
            raise UserError(f"server '{self.url}': unreachable ({e.__class__.__name__})") from None
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        if r.status_code >= 400:
            msg = body.get("error", {}).get("message") if isinstance(body.get("error"), dict) else r.text[:200]
            raise UserError(f"server '{self.url}': {r.status_code} {msg}")
        return body

    def submit(self, input_uri: str, output_uri: str) -> str:
        return self.call("POST", "/v1/jobs", json={"input": input_uri, "output": output_uri})["job_id"]

    def status(self, job_id: str) -> dict:
        return self.call("GET", f"/v1/jobs/{job_id}")


def follow(client: Client, job_id: str, poll_s: float = 1.0) -> dict:
    from pipelines.progress import Progress

    with Progress(f"job {job_id}", unit="row") as bar:
        while True:
            st = client.status(job_id)
            bar.set(st["done"], st.get("total"), errors=st["errors"], **{"tok/s": st["tokens_per_s"]})
            if JobStatus(st["status"]).terminal:
                return st
            time.sleep(poll_s)


def main(cfg: Config, input_uri: str, output_uri: str, server: str | None) -> dict:
    input_uri, output_uri = absolute_uri(input_uri), absolute_uri(output_uri)
    token = os.environ.get(cfg.serve.token_env) or None
    if server:
        return run_job(Client(server, token), input_uri, output_uri)
    from pipelines.serve import app
    from pipelines.serve.settings import with_allowed

    # an app started for this one job answers nothing else: the job may hold every slot
    alone = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"job_share": 1.0})})
    url = app.start(with_allowed(alone, input_uri, output_uri), port=runtime.free_port())
    try:
        return run_job(Client(url, token), input_uri, output_uri)
    finally:
        app.stop(cfg)


def run_job(client: Client, input_uri: str, output_uri: str) -> dict:
    return report(follow(client, client.submit(input_uri, output_uri)))


def report(st: dict) -> dict:
    """A job's last status (JobState.public) as the command's result line; an error unless done."""
    print(f"job {st['job_id']}: {st['status']}, {st['done']}/{st['total']} rows, {st['errors']} errors "
          f"-> {st['output']}")
    if st["status"] != "done":
        raise UserError(f"job {st['job_id']}: {st['status']} ({st['message']})")
    return st
