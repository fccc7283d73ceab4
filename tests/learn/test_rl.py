"""RL through `memagent train` on real Ray and a real engine (the tiny random Llama, HF engine):
it trains every parameter, publishes versions the rollout workers load, and a learner killed
mid-run resumes with the same step numbering and data cursor."""

from __future__ import annotations

import math
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.learn.conftest import BATCH_GROUPS, BUFFER_GROUPS, KILL_AT, N_ROWS, STEPS

pytestmark = pytest.mark.slow


def used(cursor: dict) -> set[int]:
    return set(range(cursor["start"])) | set(cursor["done"])


def test_rl_loss_is_finite_and_every_parameter_changed(rl_run, tiny_model_dir):
    assert all(math.isfinite(x) for x in rl_run.killed.losses + rl_run.resumed.losses)
    assert rl_run.result["steps"] == STEPS and rl_run.result["version"] == STEPS
    base = load_file(tiny_model_dir / "model.safetensors")
    final = load_file(f"{rl_run.result['model']}/model.safetensors")
    assert final.keys() == base.keys()
    same = [k for k in base if torch.equal(base[k], final[k])]
    assert not same, f"parameters unchanged after {STEPS} steps at lr 1e-2: {same}"


def test_only_the_last_versions_are_kept_and_the_final_model_is_the_last(rl_run):
    weights = rl_run.out / "weights"
    assert sorted(p.name for p in weights.iterdir()) == [f"v{STEPS - 1}", f"v{STEPS}"]  # learn.keep_versions=2
    last = load_file(weights / f"v{STEPS}" / "model.safetensors")
    final = load_file(f"{rl_run.result['model']}/model.safetensors")
    assert all(torch.equal(last[k], final[k]) for k in last)
    assert rl_run.final.weights == str(weights / f"v{STEPS}")


def test_resume_continues_the_step_numbering(rl_run):
    c = rl_run.checkpoint.step
    killed, resumed = rl_run.killed.steps, rl_run.resumed.steps
    assert killed == list(range(1, len(killed) + 1)) and KILL_AT <= len(killed) < STEPS
    assert 1 <= c < STEPS
    assert resumed == list(range(c + 1, STEPS + 1))  # nothing at or before the checkpoint is redone
    assert rl_run.final.step == STEPS
    from pipelines.learn.curve import load_history

    history = load_history(str(rl_run.out))  # the curve's: every step of both processes, once
    assert [s for s, _ in history] == list(range(1, STEPS + 1))
    assert all("rollout/reward_mean" in m for _, m in history) and (rl_run.out / "curve.png").exists()


def test_resume_continues_the_data_cursor(rl_run):
    """What the hub guarantees: a row is used up once its group was trained (in a checkpointed
    step) or dropped; a resumed run skips exactly the used-up rows, so no row is trained twice
    in the final model's history and none is skipped; rows in flight or buffered at the kill
    (and those of steps after the checkpoint) run again."""
    before, after = used(rl_run.checkpoint.cursor), used(rl_run.final.cursor)
    ran_before, ran_after = rl_run.killed.rolled, rl_run.resumed.rolled
    assert max(after) < N_ROWS  # one pass: stream index == row number
    assert len(before) >= BATCH_GROUPS * rl_run.checkpoint.step  # every trained row is used up
    assert before <= ran_before and before <= after
    assert not ran_after & before, f"rows trained before the kill ran again: {sorted(ran_after & before)}"
    assert after - before <= ran_after  # every row the resumed run used up, it ran
    assert len(after - before) >= BATCH_GROUPS * (STEPS - rl_run.checkpoint.step)
    print(f"killed after step {rl_run.killed.steps[-1]}, checkpoint of step {rl_run.checkpoint.step} "
          f"(cursor {rl_run.checkpoint.cursor}); final cursor {rl_run.final.cursor}; rows run before the "
          f"kill {sorted(ran_before)}, after {sorted(ran_after)}")
    unused = [i for i in range(N_ROWS) if i not in before]
    # The resumed run starts at the first unused rows, in order: the first buffer-full of them
    # must all finish (the run needs more groups than the buffer holds), none is passed over.
    assert set(unused[:BUFFER_GROUPS]) <= ran_after, (sorted(before), sorted(ran_after))


def test_a_published_version_reaches_the_rollout_worker(rl_run, tiny_model_dir, tokenizer):
    """Push the run's last policy to a live worker without waiting; the worker's logprobs of
    the same prompt (greedy) change and its turns name the new version."""
    import ray

    from pipelines.config import load_config
    from pipelines.errors import UserError
    from pipelines.rollout.core import RolloutSpec
    from pipelines.rollout.schedule import GroupTask
    from pipelines.rollout.service import RolloutService
    from tests.learn.rows import synthetic_rows, token_counter
    from tests.support import local_ray

    cfg = load_config(None, [o for o in rl_run.overrides if not o.startswith("rollout.reward")])
    row = synthetic_rows(1, token_counter(tokenizer))[0]
    task, spec = GroupTask(f"{row.sample_id}#1", row, 1), RolloutSpec(temperature=0.0)
    with local_ray():
        with RolloutService(cfg, []).start() as service:
            worker = service.workers[0]
            before = ray.get(worker.run_group.remote(task, spec)).trajectories[0].turns[0]
            start = time.perf_counter()
            service.push_weights(str(rl_run.out / "weights" / f"v{STEPS}"), STEPS, wait=False)
            assert time.perf_counter() - start < 5  # handed over, not waited for
            deadline = time.monotonic() + 120
            while service.worker_info()[0]["version"] != STEPS:
                assert time.monotonic() < deadline, "the worker never loaded the pushed version"
                time.sleep(0.2)
            after = ray.get(worker.run_group.remote(task, spec)).trajectories[0].turns[0]
            with pytest.raises(UserError, match="not newer"):
                service.push_weights(str(rl_run.out / "weights" / f"v{STEPS}"), STEPS)
    assert before.prompt_ids == after.prompt_ids
    assert (before.version, after.version) == (0, STEPS)
    assert abs(before.logprobs[0] - after.logprobs[0]) > 1e-3, (before.logprobs, after.logprobs)
