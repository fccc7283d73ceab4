"""The `serve:` config section: where the app binds, how big it is, and its limits."""

from __future__ import annotations

from pydantic import Field, field_validator

from pipelines.typed import Strict

LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServeConfig(Strict):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    # The bearer token is read from this environment variable, never from a config file.
    # Bound to a non-loopback host, the app refuses to start without it.
    token_env: str = "MEMAGENT_SERVE_TOKEN"
    app_name: str = "memagent"
    # Chunk store for `doc_id` documents (local folder or s3://); None: data.store.
    store: str | None = None
    # Local roots that a request's `uri` and a job's `input`/`output` may name, judged after
    # `..` and symlinks; None: the chunk store (if local) and HOME/jobs. [] allows none.
    allowed_paths: tuple[str, ...] | None = None
    # s3:// prefixes they may name (whole segments: s3://b/docs allows s3://b/docs/x only);
    # None: the chunk store's prefix if it is on S3.
    allowed_s3_prefixes: tuple[str, ...] | None = None
    # Registry names (models:/NAME/...) and model-store names (smollm2) that /v1/admin/reload may
    # name; None: the served model's registry name, if it is one, and the store's built-ins. A reload
    # to a folder or an s3:// prefix must lie under allowed_paths / allowed_s3_prefixes instead.
    allowed_models: tuple[str, ...] | None = None
    # Where job registry and the current model version live; "" -> HOME/serve.
    state_dir: str = ""
    # Serving models:/NAME@ALIAS: poll the alias and reload the version it moves to
    # (pipelines/serve/follow.py); otherwise the version it named at start is kept.
    follow_alias: bool = False
    follow_interval_s: float = Field(30.0, gt=0)
    replicas: int = Field(1, ge=1)
    replica_cpus: float = Field(1.0, gt=0)
    # Ray custom resources each agent replica also reserves, e.g. {"serve_node": 1}: places the
    # replicas on the nodes that offer them (as rollout.worker_resources does for rollout workers).
    replica_resources: dict[str, float] = {}
    # Documents in flight per replica (each interleaves their turns on one engine).
    max_ongoing_requests: int = Field(32, ge=1)
    # Requests waiting per caller beyond that; then 503 with Retry-After.
    max_queued_requests: int = Field(32, ge=0)
    retry_after_s: int = Field(2, ge=1)
    max_request_bytes: int = Field(8 << 20, gt=0)
    max_doc_tokens: int = Field(4_000_000, gt=0)
    chat_max_tokens: int = Field(1024, gt=0)
    # Batch jobs: rows per output shard, shards processed at once, retries of a failed row.
    shard_rows: int = Field(64, ge=1)
    shards_in_flight: int = Field(2, ge=1)
    row_attempts: int = Field(8, ge=1)
    # The share of the replicas' slots (replicas x max_ongoing_requests) that batch jobs' rows hold
    # at most, all jobs together; the rest stays for interactive requests (a job's rows retry at
    # once after a 503, so without a cap a job holds every slot it frees: benchmarks/soak.py).
    job_share: float = Field(0.5, gt=0.0, le=1.0)
    # MLflow traces of served answers (requests and batch rows): the fraction traced (0: none,
    # 1: all), each a span per turn with its memory (serve/tracking.py); the document's own text
    # only with trace_documents (a request's inline document; a doc_id or uri is always named).
    trace_sample: float = Field(0.0, ge=0.0, le=1.0)
    trace_documents: bool = False

    @field_validator("allowed_paths")
    @classmethod
    def local_paths(cls, v):
        bad = next((p for p in v or () if "://" in p and not p.startswith("file://")), None)
        if bad:
            raise ValueError(f"'{bad}': a local folder here; s3:// prefixes go in allowed_s3_prefixes")
        return v

    @field_validator("allowed_s3_prefixes")
    @classmethod
    def s3_prefixes(cls, v):
        bad = next((p for p in v or () if not p.startswith("s3://") or len(p) <= len("s3://")), None)
        if bad:
            raise ValueError(f"'{bad}': expected s3://bucket or s3://bucket/prefix")
        return v
