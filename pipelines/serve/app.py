"""`memagent serve`: the Ray Serve application (gateway -> agent replicas, job manager).

    MEMAGENT_SERVE_TOKEN=secret memagent serve --model smollm2 --store .memagent/store "serve.allowed_paths=[$PWD]"
    curl -s localhost:8000/v1/answer -H "Authorization: Bearer secret" \\
        -d '{"question": "What does the agent keep?", "uri": "'$PWD'/README.md"}'

Binds 127.0.0.1 by default; any other address needs a token (env `serve.token_env`),
which every call must then carry. A `uri`, a job's `input` and `output` must lie under
serve.allowed_paths (default: the chunk store and HOME/jobs) or serve.allowed_s3_prefixes,
else 403. Connects to RAY_ADDRESS when set, else starts Ray here; SIGTERM or Ctrl-C stops
the app and that Ray (pipelines/runtime.py).
"""

from __future__ import annotations

import os
import time

from pipelines import runtime
from pipelines.config import Config
from pipelines.data.config import store_uri
from pipelines.errors import UserError
from pipelines.models import absolute_ref, config_model_dir
from pipelines.serve.config import LOOPBACK
from pipelines.storage import absolute_uri, is_s3

def state_dir(cfg: Config) -> str:
    return cfg.serve.state_dir or str(cfg.home_path / "serve" / cfg.serve.app_name)


def token_of(cfg: Config) -> str | None:
    return os.environ.get(cfg.serve.token_env) or None


def check_binding(host: str, token: str | None, token_env: str) -> None:
    if host not in LOOPBACK and not token:
        raise UserError(f"--host {host}: not a loopback address, so a bearer token is required "
                        f"(set {token_env})")


def allowed(cfg: Config) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(local roots, s3 prefixes) requests may name; defaults: the chunk store and HOME/jobs."""
    s = cfg.serve
    store = store_uri(cfg, serving=True)
    paths = s.allowed_paths
    if paths is None:
        paths = ([] if is_s3(store) else [store]) + [str(cfg.home_path / "jobs")]
    prefixes = s.allowed_s3_prefixes
    if prefixes is None:
        prefixes = [store] if is_s3(store) else []
    return tuple(absolute_uri(p.removeprefix("file://")) for p in paths), tuple(prefixes)


def with_allowed(cfg: Config, *uris: str) -> Config:
    """The app (or data runner) a batch command starts may also touch the input and output its user named."""
    paths, prefixes = allowed(cfg)
    paths += tuple(u for u in uris if not is_s3(u))
    prefixes += tuple(u for u in uris if is_s3(u))
    serve = cfg.serve.model_copy(update={"allowed_paths": paths, "allowed_s3_prefixes": prefixes})
    return cfg.model_copy(update={"serve": serve})


def preflight(cfg: Config, model: str | None) -> None:
    """Bad model or store references fail here, in one line, not in restarting replicas."""
    config_model_dir(cfg, model or cfg.model.path)
    if cfg.serve.store:
        from pipelines.data.store import ChunkStore

        ChunkStore(cfg.serve.store)


def build_app(cfg: Config, model: str | None = None):
    from pipelines.serve.deployments import Agent, Jobs, Tracking
    from pipelines.track.tracker import MlflowTracker, create_tracker, parent_tags, run_tags
    from pipelines.serve.gateway import Gateway, GatewaySettings
    from pipelines.serve.access import Access, reload_names
    from pipelines.serve.replica import ReplicaSettings

    s, there = cfg.serve, runtime.portable(cfg)
    paths, prefixes = allowed(cfg)
    serve_cfg = there.serve.model_copy(update={"store": store_uri(there, serving=True), "allowed_paths": paths,
                                               "allowed_s3_prefixes": prefixes})
    from pipelines.serve.follow import Follow, alias_of
    from pipelines.track.tracker import default_tracking_uri

    ref, tracking = absolute_ref(model or cfg.model.path), default_tracking_uri(cfg.home_path, cfg.track)
    named = alias_of(ref)
    follow = Follow(*named, tracking, s.follow_interval_s) if s.follow_alias and named else None
    settings = ReplicaSettings(ref, there.home, state_dir(cfg), cfg.engine, cfg.agent, serve_cfg, tracking)
    env = runtime.worker_env()
    light = {"num_cpus": 0.01, "runtime_env": {"env_vars": env}}
    tracker = create_tracker(cfg)  # no I/O here: the Tracking deployment talks to MLflow
    tags = {k: str(v) for k, v in {**run_tags(cfg), "model": ref, "replicas": s.replicas, **parent_tags()}.items()
            if v is not None}
    track = (Tracking.options(ray_actor_options=light, max_ongoing_requests=1000).bind(tracker, s.app_name, tags)
             if isinstance(tracker, MlflowTracker) else None)
    agent = Agent.options(
        num_replicas=s.replicas, max_ongoing_requests=s.max_ongoing_requests,
        max_queued_requests=s.max_queued_requests, ray_actor_options=replica_options(cfg, env),
    ).bind(settings, track)
    jobs = Jobs.options(ray_actor_options=light, max_ongoing_requests=1000).bind(agent, settings, track)
    gateway = GatewaySettings(token_of(cfg), s.max_request_bytes, s.retry_after_s, state_dir(cfg), follow,
                              Access.of(paths, prefixes), reload_names(ref, s.allowed_models))
    return Gateway.options(ray_actor_options=light, max_ongoing_requests=10_000).bind(agent, jobs, gateway)


def replica_options(cfg: Config, env: dict[str, str]) -> dict:
    """An agent replica's Ray actor options: its CPUs, the GPUs its engine runs on
    (engine.num_gpus: tensor_parallel_size of them with engine.use_gpu), serve.replica_resources."""
    s = cfg.serve
    options = {"num_cpus": s.replica_cpus, "runtime_env": {"env_vars": env}}
    if cfg.engine.num_gpus:
        options["num_gpus"] = cfg.engine.num_gpus
    if s.replica_resources:
        options["resources"] = dict(s.replica_resources)
    return options


def start(cfg: Config, model: str | None = None, host: str | None = None, port: int | None = None) -> str:
    """Start (or connect to) Ray, deploy the app, return its base URL once replicas are up."""
    from ray import serve

    host, port = host or cfg.serve.host, cfg.serve.port if port is None else port
    check_binding(host, token_of(cfg), cfg.serve.token_env)
    preflight(cfg, model)
    runtime.connect(log_to_driver=False, local_cpus=os.cpu_count(), importable=False)
    serve.start(http_options={"host": host, "port": port})
    serve.run(build_app(cfg, model), name=cfg.serve.app_name, route_prefix="/", blocking=False)
    return f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"


def stop(cfg: Config, shutdown_ray: bool = True, timeout_s: float = 30.0) -> None:
    """Serve's shutdown (and Ray's), bounded: after a Ctrl-C to the whole process group its
    controller or raylet may be gone already, and waiting on them would hang the command
    (pipelines/runtime.py then ends what is left of the local Ray)."""
    import ray
    from ray import serve

    runtime.bounded(serve.shutdown, timeout_s)
    if shutdown_ray:
        runtime.bounded(ray.shutdown, timeout_s)


def main(cfg: Config, model: str | None, host: str | None, port: int | None) -> None:
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


def add_arguments(p) -> None:
    p.add_argument("--model", help="model name, HF folder, s3:// checkpoint or models:/NAME/VERSION")
    p.add_argument("--store", help="chunk store for doc_id documents (folder or s3://; default: data.store)")
    p.add_argument("--host", help="bind address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="port (default 8000)")


def run(cfg: Config, args) -> None:
    from pipelines.engine import refuse_stand_in
    from pipelines.models import config_model_dir
    from pipelines.models.settings import with_model_settings

    refuse_stand_in(cfg.engine, "serve")
    if args.store:
        cfg = cfg.model_copy(update={"serve": cfg.serve.model_copy(update={"store": args.store})})
    main(with_model_settings(cfg, config_model_dir(cfg, args.model), args.overrides), args.model, args.host, args.port)
