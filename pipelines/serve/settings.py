"""The Serve app's settings, built once here for both of its runners: the app (app.py) and the
Ray Data batch runner (datarunner.py) answer rows with the same replica code under the same
settings, so where a request may read, which store it reads and how a replica is placed are
decided in one place.
"""

from __future__ import annotations

import os

from pipelines import runtime
from pipelines.config import Config
from pipelines.data.config import store_uri
from pipelines.errors import UserError
from pipelines.models import config_model_dir
from pipelines.serve.config import LOOPBACK
from pipelines.serve.replica import ReplicaSettings
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


def check_store(cfg: Config) -> None:
    """A bad serve.store fails here, in one line, not in restarting replicas (data.store opens
    on first use: a server may start before anything is ingested)."""
    if cfg.serve.store:
        from pipelines.data.store import ChunkStore

        ChunkStore(cfg.serve.store)


def preflight(cfg: Config, model: str | None) -> None:
    """Bad model or store references fail here, in one line, not in restarting replicas."""
    config_model_dir(cfg, model or cfg.model.path)
    check_store(cfg)


def replica_settings(cfg: Config, model: str, state: str) -> ReplicaSettings:
    """What every agent replica (and every data-runner actor) runs with: `model` as a reference
    any node resolves, the state folder it records reloads in ("": none, follow nothing), and the
    config as another node sees it, with the chunk store (serve.store, else data.store) and the
    roots a request may read resolved here, on the driver."""
    from pipelines.track.tracker import default_tracking_uri

    there = runtime.portable(cfg)
    paths, prefixes = allowed(cfg)
    serve = there.serve.model_copy(update={"store": store_uri(there, serving=True), "allowed_paths": paths,
                                           "allowed_s3_prefixes": prefixes})
    return ReplicaSettings(model, there.home, state, cfg.engine, cfg.agent, serve,
                           default_tracking_uri(cfg.home_path, cfg.track))


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
