"""A local Ray ends with the command that started it, however the command ends.

Ray's core replaces the SIGTERM handler with one that aborts the process, so `finally`
blocks and `ray.shutdown()` never run and the raylet's dashboard and runtime-env agents
are left running, orphaned. Here SIGTERM ends a command the way Ctrl-C does (an exception
in the main thread), re-armed after every `ray.init`; `cli.main` runs each command inside
`guard()`, which also shuts down a local Ray the command left up and ends any of that
cluster's processes that outlive the shutdown.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator

GRACE_S = 5.0
SHUTDOWN_S = 30.0
stuck = False  # a bounded shutdown outlived its bound: `memagent` then exits without waiting on it


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
