"""The Ray Serve application (gateway -> agent replicas, job manager): built, started, stopped.
The `memagent serve` command runs it (serve/command.py); `memagent batch` starts one for a job
when no --server is given; its settings are serve/settings.py's.

Connects to RAY_ADDRESS when set, else starts Ray here; SIGTERM or Ctrl-C stops the app and
that Ray (pipelines/runtime.py).
"""

from __future__ import annotations

import os

from pipelines import runtime
from pipelines.config import Config
from pipelines.models import absolute_ref
from pipelines.serve.settings import check_binding, preflight, replica_options, replica_settings, state_dir, token_of


def build_app(cfg: Config, model: str | None = None):
    from pipelines.serve.access import Access, reload_names
    from pipelines.serve.deployments import Agent, Jobs, Tracking
    from pipelines.serve.follow import Follow, alias_of
    from pipelines.serve.gateway import Gateway, GatewaySettings
    from pipelines.track.tracker import MlflowTracker, create_tracker, parent_tags, run_tags

    s = cfg.serve
    settings = replica_settings(cfg, absolute_ref(model or cfg.model.path), state_dir(cfg))
    ref, tracking = settings.model, settings.tracking_uri
    named = alias_of(ref)
    follow = Follow(*named, tracking, s.follow_interval_s) if s.follow_alias and named else None
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
    access = Access.of(settings.serve.allowed_paths, settings.serve.allowed_s3_prefixes)
    gateway = GatewaySettings(token_of(cfg), s.max_request_bytes, s.retry_after_s, state_dir(cfg), follow,
                              access, reload_names(ref, s.allowed_models))
    return Gateway.options(ray_actor_options=light, max_ongoing_requests=10_000).bind(agent, jobs, gateway)


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
