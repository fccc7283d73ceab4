"""The serve package's commands: `memagent serve` runs the Ray Serve app until stopped;
`memagent batch` submits a batch QA job and follows it with a progress bar.

    MEMAGENT_SERVE_TOKEN=secret memagent serve --model smollm2 --store .memagent/store "serve.allowed_paths=[$PWD]"
    curl -s localhost:8000/v1/answer -H "Authorization: Bearer secret" \\
        -d '{"question": "What does the agent keep?", "uri": "'$PWD'/README.md"}'
    memagent batch --input questions.jsonl --output results/ --server http://127.0.0.1:8000
    memagent batch --input s3://bucket/q.parquet --output s3://bucket/answers/   # starts the app here
    memagent batch --runner data --input s3://bucket/q/ --output s3://bucket/answers/ --store s3://bucket/store

`serve` binds 127.0.0.1 by default; any other address needs a token (env `serve.token_env`),
which every call must then carry. A `uri`, a job's `input` and `output` must lie under
serve.allowed_paths (default: the chunk store and HOME/jobs) or serve.allowed_s3_prefixes,
else 403. SIGTERM or Ctrl-C stops the app and a Ray it started (pipelines/runtime.py).
`batch` (pipelines/serve/batch.py) runs through a running server, or an app it starts here, or
with --runner data a Ray Data pipeline (pipelines/serve/datarunner.py).
"""

from __future__ import annotations

import time

from pipelines.config import Config
from pipelines.errors import UserError


class Serve:
    """`memagent serve`."""

    @staticmethod
    def add_arguments(p) -> None:
        p.add_argument("--model", help="model name, HF folder, s3:// checkpoint or models:/NAME/VERSION")
        p.add_argument("--store", help="chunk store for doc_id documents (folder or s3://; default: data.store)")
        p.add_argument("--host", help="bind address (default 127.0.0.1)")
        p.add_argument("--port", type=int, help="port (default 8000)")

    @staticmethod
    def run(cfg: Config, args) -> None:
        from pipelines.engine import refuse_stand_in
        from pipelines.models import config_model_dir
        from pipelines.models.settings import with_model_settings

        refuse_stand_in(cfg.engine, "serve")
        if args.store:
            cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"store": args.store})})
        cfg = with_model_settings(cfg, config_model_dir(cfg, args.model), args.overrides)
        serve_until_stopped(cfg, args.model, args.host, args.port)


class Batch:
    """`memagent batch`."""

    @staticmethod
    def add_arguments(p) -> None:
        p.add_argument("--input", required=True, help="parquet/jsonl rows: file, folder or s3:// URI")
        p.add_argument("--output", required=True, help="folder or s3:// prefix for the parquet shards")
        p.add_argument("--server", help="URL of a running `memagent serve` (default: start one here)")
        p.add_argument("--store",
                       help="chunk store for doc_id rows (folder or s3://; default: serve.store, else data.store)")
        p.add_argument("--runner", choices=("serve", "data"), default="serve",
                       help="serve: through the Serve app (default); data: a Ray Data pipeline, no app")

    @staticmethod
    def run(cfg: Config, args) -> None:
        from pipelines.models import config_model_dir
        from pipelines.models.settings import with_model_settings
        from pipelines.serve import batch

        if args.server and args.store:
            raise UserError("--store: not with --server (a running server reads its own store)")
        if args.store:
            cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"store": args.store})})
        if not args.server:  # a running server uses its own
            cfg = with_model_settings(cfg, config_model_dir(cfg), args.overrides)
        if args.runner == "serve":
            batch.main(cfg, args.input, args.output, args.server)
            return
        if args.server:
            raise UserError("--server: only with --runner serve (the data runner starts its own engines)")
        from pipelines.serve import datarunner

        batch.report(datarunner.main(cfg, args.input, args.output))


def serve_until_stopped(cfg: Config, model: str | None, host: str | None, port: int | None) -> None:
    from pipelines.serve.app import start, stop
    from pipelines.serve.settings import allowed

    url = start(cfg, model, host, port)
    print(f"serving {model or cfg.model.path} at {url} (OpenAPI: {url}/docs); Ctrl-C stops", flush=True)
    paths, prefixes = allowed(cfg)
    print(f"uri, input and output may name only: {', '.join(paths + prefixes) or 'nothing'} "
          f"(serve.allowed_paths, serve.allowed_s3_prefixes)", flush=True)
    try:
        while True:
            time.sleep(3600)
    finally:
        stop(cfg)
