"""One real RL run shared by the learner tests: `memagent train` on the tiny random Llama,
SIGKILLed (the whole process tree) after step 3 of 6, then resumed to step 6.

Every group's rows are distinct (answers a00, a01, ...), and the reward writes each finished
rollout's answer to a log file per phase, so the tests can tell which rows ran before and
after the kill.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from tests.support import REPO, run_cli
from tests.learn.rewards import LOG_ENV
from tests.learn.rows import synthetic_rows, token_counter
from tests.tiny import TINY_LEARN_OVERRIDES

N_ROWS = 40  # more than one run can use: the stream never wraps, so a row's index is its number
STEPS, KILL_AT, BATCH_GROUPS, BUFFER_GROUPS = 6, 3, 2, 4


def rl_overrides(model_dir: Path, sft: bool = False) -> list[str]:
    """Small everything: 2 chunks of 128 tokens, 16-token memories, 2 groups of 2 per step.
    sft: the rate and checkpoints as an SFT run takes them (learn.sft.*)."""
    mode = "learn.sft" if sft else "learn"
    return [f"model.path={model_dir}", "engine.kind=hf", "engine.dtype=float32", "agent.chunk_size=128",
            "agent.memory_budget=16", "agent.final_budget=8", f"{mode}.lr=1e-2", f"{mode}.checkpoint_every=1",
            "learn.keep_versions=2", "rollout.group_size=2", f"rollout.batch_groups={BATCH_GROUPS}",
            f"rollout.buffer_groups={BUFFER_GROUPS}", "rollout.loops_per_worker=8", "rollout.worker_num_cpus=0.5",
            "rollout.reward=tests.learn.rewards:logged_length_reward", "track.enabled=false", *TINY_LEARN_OVERRIDES]


@dataclass
class Phase:
    stderr: str
    steps: list[int]  # the progress lines' step numbers, in order
    losses: list[float]
    rolled: set[int]  # rows whose rollouts finished (by the reward log)


@dataclass
class RLRun:
    out: Path
    tasks: str
    overrides: list[str]
    killed: Phase
    resumed: Phase
    checkpoint: object  # LearnerState on disk when the first process was killed
    final: object  # LearnerState at the end
    result: dict  # the resumed run's JSON line


def progress(stderr: str) -> tuple[list[int], list[float]]:
    steps, losses = [], []
    for line in stderr.splitlines():
        if line.startswith("step "):
            steps.append(int(line.split()[1].split("/")[0]))
            words = line.split()
            losses.append(float(words[words.index("loss") + 1]))
    return steps, losses


def rolled(log: Path) -> set[int]:
    return {int(a[1:]) for a in log.read_text().split()} if log.exists() else set()


def kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the command and everything it started: its process group, then every process of its
    session (Ray's workers run in their own groups, in the same session), until none is left."""
    try:
        tree = [proc.pid, *(p.pid for p in psutil.Process(proc.pid).children(recursive=True))]
        os.killpg(proc.pid, signal.SIGKILL)
    except (psutil.Error, ProcessLookupError):  # it ended by itself: sweep what it left
        tree = [proc.pid]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [p for p in psutil.process_iter() if (p.pid in tree or _sid(p.pid) == proc.pid) and _alive(p)]
        if not left:
            break
        for p in left:
            try:
                p.kill()
            except psutil.Error:
                pass
        time.sleep(0.2)
    proc.wait(timeout=10)
    assert not left, f"processes of the killed run still alive: {left}"


def _alive(p: psutil.Process) -> bool:
    try:
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


def train_until_killed(args: list[str], env: dict, kill_at: str, ready, timeout: float = 400) -> str:
    """Run `memagent ARGS`; once a stderr line starts with kill_at and ready() holds, kill it."""
    proc = subprocess.Popen([sys.executable, "-m", "pipelines.cli", *args], cwd=REPO, text=True,
                            env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            lines.append(line)
            if line.startswith(kill_at):
                seen.set()
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert seen.wait(timeout), f"no '{kill_at}' within {timeout} s:\n{''.join(lines)[-3000:]}"
        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert proc.poll() is None, "the run ended before it could be killed"
    finally:
        kill_session(proc)
    reader.join(timeout=10)
    return "".join(lines)


@pytest.fixture(scope="session")
def rl_run(tmp_path_factory, tiny_model_dir, tokenizer) -> RLRun:
    from pipelines.data.tasks import write_task_rows
    from pipelines.learn.runs import latest_state

    root = tmp_path_factory.mktemp("rl")
    tasks = str(root / "tasks")
    write_task_rows(synthetic_rows(N_ROWS, token_counter(tokenizer)), tasks)
    out, overrides = root / "run", rl_overrides(tiny_model_dir)
    args = ["train", "--tasks", tasks, "--steps", str(STEPS), "--out", str(out), *overrides]

    # Ray Train indexes a reported checkpoint seconds after the step (2 steps late, seen here):
    # the kill waits until the index names one, so there is something to resume.
    err = train_until_killed(args, {LOG_ENV: str(root / "killed.log")}, f"step {KILL_AT}/{STEPS}",
                             lambda: latest_state(str(out), str(tiny_model_dir)) is not None)
    checkpoint = latest_state(str(out), str(tiny_model_dir))
    assert checkpoint is not None, err[-3000:]
    killed = Phase(err, *progress(err), rolled(root / "killed.log"))

    proc = run_cli("train", "--resume", *args[1:], env={LOG_ENV: str(root / "resumed.log")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    resumed = Phase(proc.stderr, *progress(proc.stderr), rolled(root / "resumed.log"))
    return RLRun(out, tasks, overrides, killed, resumed, checkpoint, latest_state(str(out), str(tiny_model_dir)),
                 json.loads(proc.stdout.strip().splitlines()[-1]))
