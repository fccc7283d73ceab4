"""Quiet by default: library logs go to a file under the home; a command's own output stays readable.

While a command runs, the process's stderr (file descriptor 2) is the log file
HOME/logs/memagent-YYYYmmdd-HHMMSS-PID.log. Whatever writes there lands in the file, however
and whenever it was set up: Python logging handlers made at import time, tqdm bars and
warnings of libraries, vLLM's engine process and Ray's processes (they inherit the descriptor),
C++ logs. A command's own status text (progress, notes, errors) goes to `console()`, the
terminal's stderr; stdout is untouched. `--verbose` or MEMAGENT_LOG=info|debug leaves stderr
alone, so library logs show there.

    from pipelines import logs
    print("eval: 3 of 8 cells already done", file=logs.console())
    ray.init(log_to_driver=logs.shown())   # worker output is forwarded only when shown

cli.main calls route() once the home is known and restore() at the end.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from pipelines.errors import UserError
from pipelines.track.redact import env_secrets, redact

KEEP = 50  # newest log files kept under HOME/logs
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MODES = {"": logging.INFO, "quiet": logging.INFO, "info": logging.INFO, "debug": logging.DEBUG}


@dataclass
class _Routing:
    shown: bool = False  # route() was asked to show library logs on stderr
    path: Path | None = None
    saved_fd: int | None = None  # the terminal's stderr while fd 2 is the log file
    console: TextIO | None = None  # our stream on saved_fd, when sys.stderr was fd 2
    handler: logging.Handler | None = None
    root_level: int = logging.WARNING


_state = _Routing()


def console() -> TextIO:
    """Where a command's own status text goes: the terminal's stderr, also while libraries log to the file."""
    return _state.console or sys.stderr


def shown() -> bool:
    """The command shows library logs on stderr (--verbose); then Ray forwards its workers' output too.
    False outside a command (a benchmark, a test): their stdout stays theirs."""
    return _state.shown


def log_path() -> Path | None:
    return _state.path


def mode(verbose: bool) -> tuple[int, bool]:
    """(level, shown) from --verbose and MEMAGENT_LOG (quiet, info, debug)."""
    name = os.environ.get("MEMAGENT_LOG", "").strip().lower()
    if name not in MODES:
        raise UserError(f"MEMAGENT_LOG={name}: unknown (one of quiet, info, debug)")
    return MODES[name], verbose or name in ("info", "debug")


def route(home: Path, verbose: bool = False) -> Path | None:
    """Send library logs to a new file under home (unless shown); returns its path. Idempotent."""
    if _state.handler is not None:
        return _state.path
    level, show = mode(verbose)
    _library_env(level)
    if not show:
        try:
            _redirect(_open_log(home / "logs"))
            print(f"memagent: library logs: {_state.path} (--verbose shows them here)", file=console(), flush=True)
        except OSError as e:
            print(f"memagent: cannot write logs under {home / 'logs'} ({e.strerror}); showing them here",
                  file=sys.stderr)
    _state.shown = _state.saved_fd is None
    root = logging.getLogger()
    _state.handler, _state.root_level = logging.StreamHandler(sys.stderr), root.level
    _state.handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(_state.handler)
    root.setLevel(level)
    return _state.path


def _library_env(level: int) -> None:
    """Read by libraries when they start, here and in the processes they spawn."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")  # its default is stdout
    if level <= logging.DEBUG:
        os.environ["VLLM_LOGGING_LEVEL"] = "DEBUG"
    else:
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "INFO")


def _open_log(folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    old = sorted(folder.glob("memagent-*.log"))  # the name starts with the time
    for stale in old[: max(0, len(old) + 1 - KEEP)]:
        with contextlib.suppress(OSError):
            stale.unlink()
    path = folder / f"memagent-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.write(fd, f"memagent {redact(' '.join(sys.argv[1:]), env_secrets())} (pid {os.getpid()})\n".encode())
    _state.path = path.resolve()
    return fd


def _writes_fd2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return False


def _redirect(log_fd: int) -> None:
    sys.stderr.flush()
    _state.saved_fd = os.dup(2)
    if _writes_fd2(sys.stderr):  # else (a test's captured sys.stderr) sys.stderr stays the console
        _state.console = open(_state.saved_fd, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                              closefd=False)
    os.dup2(log_fd, 2)
    os.close(log_fd)


def log_exception(err: BaseException) -> None:
    """An unexpected error's traceback, into the log."""
    logging.getLogger("memagent").error("command failed", exc_info=err)


def restore() -> None:
    """Undo route(): stderr is the terminal again (in-process callers such as tests)."""
    global _state
    root = logging.getLogger()
    if _state.handler is not None:
        root.removeHandler(_state.handler)
        root.setLevel(_state.root_level)
    if _state.saved_fd is not None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
        if _state.console is not None:
            _state.console.close()  # closefd=False: only flushes
        os.dup2(_state.saved_fd, 2)
        os.close(_state.saved_fd)
    _state = _Routing()
