"""Ray for a command: the one place that connects to (or starts) Ray, decides which of the
driver's environment reaches workers, makes a config portable to another node, and ends a
local Ray with the command that started it.

    with runtime.session(local_cpus=os.cpu_count()):   # RAY_ADDRESS's cluster, else a local Ray
        actor = Worker.options(runtime_env={"env_vars": runtime.worker_env()}).remote(runtime.portable(cfg))

A local Ray ends with the command that started it, however the command ends. Ray's core
replaces the SIGTERM handler with one that aborts the process, so `finally` blocks and
`ray.shutdown()` never run and the raylet's dashboard and runtime-env agents are left
running, orphaned. Here SIGTERM ends a command the way Ctrl-C does (an exception in the main
thread), re-armed after every `ray.init`; `cli.main` runs each command inside `guard()`, which
also shuts down a local Ray the command left up and ends any of that cluster's processes that
outlive the shutdown.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pipelines import logs

if TYPE_CHECKING:
    from pipelines.config import Config

GRACE_S = 5.0
SHUTDOWN_S = 30.0
stuck = False  # a bounded shutdown outlived its bound: `memagent` then exits without waiting on it

# The driver's environment its actors get on any node, besides every AWS_ variable (S3 endpoint,
# region and keys). Not MEMAGENT_HOME: each node keeps its own home (an actor elsewhere caches its
# model there; without one, under the driver's home path: see portable()).
FORWARDED_ENV = ("VLLM_LOGGING_LEVEL", "TOKENIZERS_PARALLELISM", "MLFLOW_TRACKING_URI")


def connect(log_to_driver: bool | None = None, local_cpus: int | None = None, importable: bool = True,
            configure_logging: bool = True) -> bool:
    """Join RAY_ADDRESS's cluster or start a local Ray, once per process; True if this call did
    (the caller may then end it). log_to_driver: forward workers' output here (None: only when
    library logs are shown, --verbose; else it stays in Ray's session folder, which the
    command's log file names). local_cpus: CPUs of a local start (None: Ray counts them).
    importable: workers import from the driver's working directory (user rewards by dotted path)."""
    import ray

    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    options: dict[str, Any] = {"include_dashboard": False, "configure_logging": configure_logging,
                               "log_to_driver": logs.shown() if log_to_driver is None else log_to_driver}
    if importable:
        options["runtime_env"] = {"env_vars": {"PYTHONPATH": importable_path()}}
    if local_cpus is not None and not address:
        options["num_cpus"] = local_cpus
    ctx = ray.init(address=address, **options)
    route_ray_errors()
    logging.getLogger("memagent").info("Ray workers' logs: %s/logs", ctx.address_info.get("session_dir"))
    return True


def route_ray_errors() -> None:
    """Ray's driver prints the errors its raylets push (e.g. Serve's controller ending itself at
    shutdown: "(raylet) Task ServeController.graceful_shutdown failed ... killed by `ray.kill`")
    straight to stdout, whatever log_to_driver says. Outside --verbose they go where every library
    line goes (the command's log file), as a warning of the `ray` logger."""
    import ray._private.worker as ray_worker

    printer = ray_worker.print_to_stdstream
    if getattr(printer, "routed", False):
        return

    def print_or_log(data: dict, ignore_prefix: bool) -> None:
        if logs.shown():
            return printer(data, ignore_prefix)
        for line in data.get("lines", []):
            logging.getLogger("ray").warning("(%s) %s", data.get("pid", ""), line)

    print_or_log.routed = True
    ray_worker.print_to_stdstream = print_or_log


@contextlib.contextmanager
def session(**options) -> Iterator[None]:
    """connect(**options) for the block; a Ray this block started or joined is shut down after it."""
    import ray

    started = connect(**options)
    try:
        yield
    finally:
        if started:
            ray.shutdown()


def importable_path() -> str:
    """PYTHONPATH for workers: the driver's working directory first, then its own PYTHONPATH."""
    return os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)


# Credentials never travel in a runtime_env (Ray shows it in actor metadata and the dashboard):
# workers read them from the environment their node gives them (KubeRay envFrom a Secret; locally,
# the process environment a local Ray's workers inherit from the driver that started it).
SECRET_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")


def worker_env(**overrides: str) -> dict[str, str]:
    """The environment variables an actor gets from the driver (FORWARDED_ENV and the AWS_
    settings that are set, credentials excepted), with `overrides` over them."""
    env = {k: v for k, v in os.environ.items()
           if (k.startswith("AWS_") and k not in SECRET_ENV) or k in FORWARDED_ENV}
    return {**env, **overrides}


def portable(cfg: Config) -> Config:
    """`cfg` as a process on another node (or with another working directory) must see it: the
    home this driver uses made absolute (a node without MEMAGENT_HOME uses it), the chunk
    store's local path (data.store, serve.store) made absolute (s3:// unchanged)."""
    from pipelines.storage import absolute_uri

    def stored(section):
        return section.model_copy(update={"store": absolute_uri(section.store)}) if section.store else section

    return cfg.model_copy(update={"home": str(cfg.home_path), "data": stored(cfg.data), "serve": stored(cfg.serve)})


def free_port() -> int:
    """A loopback port free now (the OS's pick), for a service this process is about to start."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stopped(KeyboardInterrupt):
    """A stop signal as an exception: cleanup code runs as it does for Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise(signum, frame) -> None:
    raise Stopped(signum)


def stop_on_signals() -> None:
    """SIGTERM raises Stopped in the main thread (Ctrl-C already raises KeyboardInterrupt)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise)


def _post_init_hooks() -> list | None:
    """Ray runs these after every ray.init, after its core has taken SIGTERM."""
    try:
        from ray._private import worker
    except ImportError:
        return None
    return getattr(worker, "_post_init_hooks", None)


def _local_ray():
    """The `ray` module if this process runs a Ray it started (not a connection to a cluster)."""
    ray = sys.modules.get("ray")
    if ray is None or not ray.is_initialized():
        return None
    node = getattr(sys.modules.get("ray._private.worker"), "_global_node", None)
    return ray if getattr(node, "head", False) else None


def bounded(fn, timeout_s: float) -> bool:
    """A shutdown fn() in a daemon thread; whether it returned within timeout_s (if not, `stuck`)."""
    global stuck
    t = threading.Thread(target=fn, name=f"bounded-{fn.__name__}", daemon=True)
    t.start()
    t.join(timeout_s)
    stuck = stuck or t.is_alive()
    return not t.is_alive()


def shutdown_local_ray() -> None:
    """ray.shutdown(), bounded (after a Ctrl-C to the whole process group its raylet may be gone,
    and the shutdown can wait on it), then end whatever of this process's children outlived it."""
    import psutil

    ray = _local_ray()
    if ray is None:
        return
    children = psutil.Process().children(recursive=True)
    bounded(ray.shutdown, SHUTDOWN_S)
    alive = [p for p in children if p.is_running()]
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.terminate()
    _, alive = psutil.wait_procs(alive, timeout=GRACE_S)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()


@contextlib.contextmanager
def guard() -> Iterator[None]:
    """Run a command so that a local Ray it starts never outlives it."""
    hooks = _post_init_hooks()
    if hooks is not None and stop_on_signals not in hooks:
        hooks.append(stop_on_signals)
    stop_on_signals()
    try:
        yield
    finally:
        if threading.current_thread() is threading.main_thread():
            # Cleanup is bounded: a second Ctrl-C or SIGTERM must not cut it short.
            previous = signal.signal(signal.SIGINT, signal.SIG_IGN), signal.signal(signal.SIGTERM, signal.SIG_IGN)
            try:
                shutdown_local_ray()
            finally:
                signal.signal(signal.SIGINT, previous[0])
                signal.signal(signal.SIGTERM, previous[1])
        else:
            shutdown_local_ray()
