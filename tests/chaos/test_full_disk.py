"""A full disk while a checkpoint is written: the run's OUT is a small tmpfs, filled to the last
few KB after step FILL_AT. The run ends with one line naming OUT (no Ray Train restarts: they
would fail the same way), the newest whole checkpoint still loads, and once there is room again
`--resume` continues from it to the last step.

Mounting needs root (CAP_SYS_ADMIN): where `mount -t tmpfs` is refused the test skips, saying so."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.chaos.conftest import Training, steps_in
from tests.chaos.rewards import GATE_ENV, HOLD_ENV
from tests.learn.conftest import rl_overrides
from tests.support import run_cli

STEPS, FILL_AT, SIZE = 6, 2, "300m"  # a checkpoint here: ~40 MB of learner state, a policy ~13 MB
# A step takes 2 groups: the rows from HOLD_FROM on wait at a gate until the disk is full, so a fast
# run cannot finish (or pass its next checkpoint) before the test has filled it.
HOLD_FROM = 2 * FILL_AT + 6


@pytest.fixture
def small_disk(tmp_path):
    mount = tmp_path / "out"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(mount) -> os.PathLike:
    """A file that takes all but 64 KB of the mount's free space. The run writes its checkpoint
    meanwhile, so the space can shrink between measuring and allocating (ENOSPC): measure again
    and extend the file by what is left, until less than 1 MB is free."""
    import errno

    filler = mount / "filler"
    with open(filler, "wb") as f:
        for _ in range(100):
            st = os.statvfs(mount)
            free = st.f_bavail * st.f_frsize - (64 << 10)
            if free <= 1 << 20:
                return filler
            try:
                os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, free)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
    return filler


@pytest.mark.slow  # a real training run or a server stopped and started
def test_a_full_disk_mid_checkpoint_is_one_line_and_resume_continues(small_disk, rl_tasks, tiny_model_dir, tmp_path):
    from pipelines.learn.runs import latest_state, newest_complete

    out = small_disk / "run"
    gate = tmp_path / "gate"
    gate.touch()
    gated = [o for o in rl_overrides(tiny_model_dir) if not o.startswith("rollout.reward=")]
    args = ["train", "--tasks", rl_tasks, "--steps", str(STEPS), "--out", str(out), *gated,
            "rollout.reward=tests.chaos.rewards:gated_reward"]
    run = Training(args, {GATE_ENV: str(gate), HOLD_ENV: str(HOLD_FROM)})
    try:
        run.wait_step(FILL_AT)
        filler = fill(small_disk)
        gate.unlink()
        rc, _, err = run.finish()
    finally:
        run.kill()
    assert rc == 2, err[-3000:]  # a UserError, not a crash
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"memagent: error: '{out}") and "no space left on device" in last, err[-3000:]
    assert run.steps()[-1] < STEPS

    filler.unlink()
    stands = latest_state(str(out), str(tiny_model_dir))  # the index, or the newest whole checkpoint
    assert stands is not None and stands.step >= 1 and newest_complete(str(out)) is not None
    resumed = run_cli("train", "--resume", *args[1:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert steps_in(resumed.stderr.splitlines()) == list(range(stands.step + 1, STEPS + 1))  # from what stands
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == STEPS
