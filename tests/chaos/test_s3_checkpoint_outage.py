"""The S3 endpoint refusing while Ray Train uploads a checkpoint to an s3:// OUT. A proxy in front
of SeaweedFS (conftest.Tripwire) refuses every connection from the moment the upload of a
checkpoint's learner.pt begins: at step SHORT_AT for CHAOS_S3_OUTAGE_S seconds (within the retry
budget), at step DOWN_AT until the test restores it. The short outage costs nothing: the upload is retried with storage.retried's backoff
(learn/checkpoint.py: upload), no learner restart, no step run twice. The lasting one ends the run
with one line naming a URI in OUT; the previous checkpoint stays whole and, the endpoint back,
`--resume` continues from it to the last step.

AWS_MAX_ATTEMPTS=5 here (1 + 2 + 4 + 8 s of backoff): three times the short outage, and
the lasting outage gives up within a minute. (Stopping SeaweedFS itself made the short outage as
long as its restart, over 30 s on a loaded CI machine.)"""

from __future__ import annotations

import json
import os

import pytest

from tests.chaos.conftest import Training, Tripwire, steps_in
from tests.learn.conftest import rl_overrides
from tests.support import run_cli

OUTAGE_S = float(os.environ.get("CHAOS_S3_OUTAGE_S", "5"))
STEPS, SHORT_AT, DOWN_AT = 5, 2, 4


@pytest.fixture
def tripwire(flaky_s3, monkeypatch):
    """The run's S3 goes through a Tripwire (checkpoint uploads at SHORT_AT and DOWN_AT)."""
    wire = Tripwire(flaky_s3, rb"learner/checkpoint_[^/\s]+/learner\.pt", {SHORT_AT: OUTAGE_S, DOWN_AT: None})
    for k, v in {**flaky_s3.env(), "AWS_ENDPOINT_URL": wire.endpoint, "AWS_MAX_ATTEMPTS": "5"}.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    yield wire
    wire.close()


@pytest.mark.slow  # a real training run or a server stopped and started
def test_a_checkpoint_upload_rides_out_a_short_outage_and_a_lasting_one_is_one_line(tripwire, flaky_s3, rl_tasks,
                                                                                    tiny_model_dir):
    from pipelines.learn.runs import latest_state

    out = "s3://chaos/checkpoint-outage"
    args = ["train", "--tasks", rl_tasks, "--steps", str(STEPS), "--out", out, *rl_overrides(tiny_model_dir)]
    run = Training(args)
    try:
        rc, _, err = run.finish()
    finally:
        run.kill()
    assert tripwire.tripped == [SHORT_AT, DOWN_AT], err[-3000:]
    assert rc == 2, err[-3000:]  # a UserError, not a crash
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"memagent: error: '{out}/") and "S3 endpoint unreachable after 5 attempts" in last, last
    # the short outage: no restart, no step again. The driver prints a step's line after writing its
    # curve point, and on a loaded machine it lags the learner by a step or two, so the lasting
    # outage (the learner's upload at DOWN_AT) can cut the printed steps short at SHORT_AT
    steps = run.steps()
    assert steps == [*range(1, len(steps) + 1)] and SHORT_AT <= len(steps) <= DOWN_AT, err[-3000:]

    tripwire.restore()
    stands = latest_state(out, str(tiny_model_dir))
    # the checkpoint before the lasting outage, or the one before it where Ray Train's own index write
    # (not retried) for DOWN_AT - 1 came after the outage began: the steps since it are redone
    assert stands is not None and stands.step in (DOWN_AT - 2, DOWN_AT - 1), stands
    resumed = run_cli("train", "--resume", *args[1:])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert steps_in(resumed.stderr.splitlines()) == list(range(stands.step + 1, STEPS + 1))
    assert json.loads(resumed.stdout.strip().splitlines()[-1])["steps"] == STEPS
