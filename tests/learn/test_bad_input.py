"""Every bad input to `memagent train` gives one line naming the input, exit 2, no traceback, and
nothing already on disk is written over.

The checks that run before Ray starts are called in-process (`pipelines.cli.main`, the same
code path as the command, without a process start each); the one that only a learner worker
can see (a token budget below a conversation) runs as a real command on real Ray."""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from pipelines import cli
from pipelines.data.tasks import write_task_rows
from tests.support import make_tiny_llama, run_cli
from tests.support import check_error
from tests.learn.conftest import rl_overrides
from tests.learn.rows import synthetic_rows, token_counter

pytestmark = pytest.mark.slow


class Proc:
    def __init__(self, returncode: int, stderr: str):
        self.returncode, self.stderr = returncode, stderr


def train(capsys, *args: str) -> Proc:
    capsys.readouterr()
    code = cli.main(["train", *args])
    return Proc(code, capsys.readouterr().err)


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture
def base(tiny_model_dir) -> list[str]:
    return rl_overrides(tiny_model_dir)


@pytest.fixture
def tasks(tmp_path, tokenizer) -> str:
    uri = str(tmp_path / "tasks")
    write_task_rows(synthetic_rows(4, token_counter(tokenizer)), uri)
    return uri


def test_task_rows_that_are_not_there_or_empty(capsys, tmp_path, base):
    out = tmp_path / "out"
    check_error(train(capsys, "--tasks", str(tmp_path / "none"), "--out", str(out), *base), "none",
                "no such file or folder")
    write_task_rows([], str(tmp_path / "empty"))
    check_error(train(capsys, "--tasks", str(tmp_path / "empty"), "--out", str(out), *base), "empty", "no rows")
    assert not out.exists()


def test_task_rows_without_answers(capsys, tmp_path, tokenizer, base):
    rows = synthetic_rows(3, token_counter(tokenizer))
    rows[1] = replace(rows[1], answers=[])
    write_task_rows(rows, str(tmp_path / "tasks"))
    check_error(train(capsys, "--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "out"), *base),
                "task row 'r01'", "no answers")
    rows[1] = replace(rows[1], answers=["  "])
    write_task_rows(rows, str(tmp_path / "blank"))
    check_error(train(capsys, "--tasks", str(tmp_path / "blank"), "--out", str(tmp_path / "out"), *base),
                "task row 'r01'", "no answers")
    assert not (tmp_path / "out").exists()


def test_sft_rows_without_evidence(capsys, tmp_path, tokenizer, base):
    rows = [replace(r, evidence=None) for r in synthetic_rows(2, token_counter(tokenizer))]
    write_task_rows(rows, str(tmp_path / "tasks"))
    sft = rl_overrides(base[0].removeprefix("model.path="), sft=True)
    check_error(train(capsys, "--sft", "--tasks", str(tmp_path / "tasks"), "--out", str(tmp_path / "out"), *sft),
                "task row 'r00'", "no evidence")


def test_a_model_folder_that_is_not_a_model(capsys, tmp_path, tasks, base):
    (tmp_path / "notmodel").mkdir()
    (tmp_path / "notmodel" / "README").write_text("hello")
    args = [*base, f"model.path={tmp_path / 'notmodel'}"]
    check_error(train(capsys, "--tasks", tasks, "--out", str(tmp_path / "out"), *args), "notmodel",
                "not a model folder")
    assert not (tmp_path / "out").exists()


def test_a_reward_that_does_not_import(capsys, tmp_path, tasks, base):
    args = [*base, "rollout.reward=nowhere:fn"]
    check_error(train(capsys, "--tasks", tasks, "--out", str(tmp_path / "out"), *args),
                "rollout.reward 'nowhere:fn'", "cannot import")
    assert not (tmp_path / "out").exists()


def test_resume_without_a_checkpoint(capsys, tmp_path, tasks, base):
    check_error(train(capsys, "--resume", "--tasks", tasks, "--out", str(tmp_path / "out"), *base), "--resume",
                "no checkpoint", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


@pytest.fixture
def run_copy(rl_run, tmp_path) -> Path:
    """A copy of the finished RL run (step 6), to break without touching the shared one."""
    dest = tmp_path / "run"
    shutil.copytree(rl_run.out, dest)
    return dest


def latest_checkpoint(out: Path) -> Path:
    from pipelines.learn.runs import INDEX

    snapshot = json.loads((out / "learner" / INDEX).read_text())
    return out / "learner" / snapshot["latest_checkpoint_result"]["checkpoint_dir_name"]


def test_an_out_that_holds_a_run_needs_resume(capsys, run_copy, rl_run, base):
    before = tree(run_copy)
    check_error(train(capsys, "--tasks", rl_run.tasks, "--out", str(run_copy), *base), str(run_copy),
                "holds a run at step 6", "--resume")
    check_error(train(capsys, "--resume", "--steps", "3", "--tasks", rl_run.tasks, "--out", str(run_copy), *base),
                "--steps 3", "already at step 6")
    assert tree(run_copy) == before


def test_resume_from_a_corrupt_checkpoint(capsys, run_copy, rl_run, base):
    state = latest_checkpoint(run_copy) / "state.json"
    state.write_text('{"step": 6, "vers')
    before = tree(run_copy)
    check_error(train(capsys, "--resume", "--tasks", rl_run.tasks, "--out", str(run_copy), *base),
                str(state.parent), "unreadable")
    assert tree(run_copy) == before


def test_resume_after_a_torn_index(run_copy, rl_run, tiny_model_dir):
    """A kill while Ray Train rewrites its checkpoint index in place leaves it empty (seen in CI):
    the newest checkpoint written whole stands in for it, and the run resumes from there."""
    from pipelines.learn.runs import INDEX, latest_state

    newest = latest_checkpoint(run_copy)
    (run_copy / "learner" / INDEX).unlink()  # never written (its write to an s3:// OUT is not retried)
    assert latest_state(str(run_copy), str(tiny_model_dir)).step == 6
    (run_copy / "learner" / INDEX).write_text("")
    assert latest_state(str(run_copy), str(tiny_model_dir)).step == 6
    learner = (newest / "learner.pt").read_bytes()
    (newest / "learner.pt").write_bytes(learner[: len(learner) // 2])  # cut by a kill during its upload
    assert latest_state(str(run_copy), str(tiny_model_dir)).step == 5
    proc = run_cli("train", "--resume", "--steps", "6", "--tasks", rl_run.tasks, "--out", str(run_copy),
                   *rl_run.overrides)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step 6/6" in proc.stderr and "step 5/6" not in proc.stderr
    assert json.loads((run_copy / "learner" / INDEX).read_text())  # Ray Train's own index again
    assert latest_state(str(run_copy), str(tiny_model_dir)).step == 6


def test_resume_with_another_model(capsys, run_copy, rl_run, base, tmp_path, tokenizer):
    other = make_tiny_llama(tmp_path / "other", tokenizer, hidden_size=32, intermediate_size=64,
                            num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                            max_position_embeddings=2048)
    before = tree(run_copy)
    check_error(train(capsys, "--resume", "--tasks", rl_run.tasks, "--out", str(run_copy), *base,
                      f"model.path={other}"), str(latest_checkpoint(run_copy)), "of another model")
    assert tree(run_copy) == before


def test_a_token_budget_below_one_conversation(tmp_path, tasks, base):
    """Only the learner worker sees a conversation's length: its UserError still reaches the
    user as one line, at once (not after Ray Train's retries)."""
    proc = run_cli("train", "--tasks", tasks, "--steps", "2", "--out", str(tmp_path / "out"), *base,
                   "learn.token_budget=64", "learn.max_failures=2")
    check_error(proc, "learn.token_budget=64", "below one conversation of")


def test_rl_without_signal_says_so_then_stops_with_the_cause(tmp_path, base, tokenizer):
    """The tiny random model never boxes the answer: under the real (strict) reward every group is
    all-wrong and dropped by dynamic sampling. The run prints the dropped-group status while it waits,
    then ends with one line naming the cause and the remedy, before any step."""
    tasks = str(tmp_path / "tasks")
    write_task_rows(synthetic_rows(40, token_counter(tokenizer)), tasks)
    strict = [o for o in base if not o.startswith("rollout.reward=")]
    proc = run_cli("train", "--tasks", tasks, "--steps", "2", "--out", str(tmp_path / "out"), *strict,
                   "learn.max_dropped_groups=6", "learn.status_s=0.1")
    check_error(proc, "RL without signal", "all wrong", "SFT first")
    waiting = [line for line in proc.stderr.splitlines() if "waiting for a batch" in line]
    assert waiting and "dropped for equal rewards (mean reward 0.00)" in waiting[0], proc.stderr[-2000:]
    assert "step 1/2 " not in proc.stderr  # no step was trained
