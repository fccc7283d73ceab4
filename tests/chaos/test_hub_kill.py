"""The rollout hub actor SIGKILLed mid-run: Ray restarts it (its workers die with it), the
learner fails on its next call and Ray Train restarts it from its checkpoint, and the restarted
hub starts from that checkpoint's cursor (hub.resume). The run ends at its last step with every
row trained once: the exactly-once assertion of the learner kill test (tests/learn/test_rl.py),
with the rows told apart by the process that ran them (old workers died with the hub)."""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from tests.chaos.conftest import Training
from tests.learn.conftest import rl_overrides
from tests.learn.rewards import LOG_ENV

STEPS, KILL_AT = 8, 3


def used(cursor: dict) -> set[int]:
    return set(range(cursor["start"])) | set(cursor["done"])


class Checkpoints:
    """Every checkpoint's state.json as it appears (Ray Train keeps only the last two)."""

    def __init__(self, out: Path):
        self.out, self.states, self._stop = out, {}, threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            for f in self.out.glob("learner/checkpoint_*/state.json"):
                try:
                    state = json.loads(f.read_text())
                except (OSError, ValueError):  # being written or removed
                    continue
                self.states.setdefault(state["step"], state)
            time.sleep(0.05)

    def stop(self) -> dict[int, dict]:
        self._stop.set()
        self._thread.join()
        return self.states


def in_session(sid: int, title: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if os.getsid(p.pid) == sid and (p.info["cmdline"] or [""])[0].startswith(title):
                found.append(p)
        except (OSError, psutil.Error):
            continue
    return found


@pytest.mark.slow  # a real training run or a server stopped and started
def test_a_killed_hub_resumes_from_the_checkpoint_and_trains_every_row_once(rl_tasks, tiny_model_dir, tmp_path):
    out, log = tmp_path / "run", tmp_path / "rolled.log"
    overrides = [o if not o.startswith("rollout.reward=") else "rollout.reward=tests.chaos.rewards:pid_logged_reward"
                 for o in rl_overrides(tiny_model_dir)]
    run = Training(["train", "--tasks", rl_tasks, "--steps", str(STEPS), "--out", str(out), *overrides],
                   {LOG_ENV: str(log)})
    checkpoints = Checkpoints(out)
    try:
        run.wait_step(KILL_AT)
        (hub,) = in_session(run.proc.pid, "ray::RolloutHub")
        old_workers = {p.pid for p in in_session(run.proc.pid, "ray::RolloutWorker")}
        os.kill(hub.pid, signal.SIGKILL)
        rc, stdout, err = run.finish()
    finally:
        run.kill()
        states = checkpoints.stop()
    assert rc == 0, err[-3000:]
    (resumed_from,) = map(int, re.findall(r"the rollout hub was restarted: rollouts resume from the checkpoint "
                                          r"of step (\d+)", err))
    steps = run.steps()
    assert steps[-(STEPS - resumed_from):] == list(range(resumed_from + 1, STEPS + 1))
    assert json.loads(stdout.splitlines()[-1])["steps"] == STEPS

    rolled = [line.split() for line in log.read_text().splitlines()]
    old = {int(a[1:]) for a, pid in rolled if int(pid) in old_workers}
    new = {int(a[1:]) for a, pid in rolled if int(pid) not in old_workers}
    before, after = used(states[resumed_from]["cursor"]), used(states[STEPS]["cursor"])
    assert old_workers and new, "no rollouts after the kill: the hub did not come back"
    assert before <= old and before <= after
    assert not new & before, f"rows trained before the checkpoint ran again: {sorted(new & before)}"
    assert after - before <= new  # every row the resumed learner used up, the new workers ran
    assert len(after - before) >= 2 * (STEPS - resumed_from)  # 2 groups a step
