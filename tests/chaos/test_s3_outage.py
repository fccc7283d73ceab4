"""The S3 endpoint refusing (SeaweedFS stopped) during a weight push: the push rides it out with
storage.retried's backoff; when the endpoint stays down, one line naming the URI, and the versions
already published stay whole (the new one never gains its config.json, which readers check for).

CHAOS_S3_OUTAGE_S sets the outage (the issue's 30 s; 10 s by default to keep the suite short: the
behaviour is the same, one backoff step fewer)."""

from __future__ import annotations

import os

import pytest
import torch

from pipelines.errors import UserError
from pipelines.learn.weights import FolderPublisher
from pipelines.storage import download_prefix, exists
from tests.chaos.conftest import outage

OUTAGE_S = float(os.environ.get("CHAOS_S3_OUTAGE_S", "10"))


@pytest.fixture
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir)


def weights_of(uri: str, tmp_path) -> dict:
    from safetensors.torch import load_file

    local = download_prefix(uri, tmp_path / uri.rsplit("/", 1)[1])
    return load_file(local / "model.safetensors")


def nudge(model) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)


@pytest.mark.slow  # a real training run or a server stopped and started
def test_a_weight_push_rides_out_an_outage(on_flaky_s3, model, tiny_model_dir, tmp_path):
    publisher = FolderPublisher("s3://chaos/push", str(tiny_model_dir), keep=4)
    v1 = publisher.publish(model, 1)
    nudge(model)
    back = outage(on_flaky_s3, OUTAGE_S)
    v2 = publisher.publish(model, 2)  # starts while the endpoint refuses
    back.join()
    before, after = weights_of(v1, tmp_path), weights_of(v2, tmp_path)
    name = "model.embed_tokens.weight"
    assert torch.allclose(after[name], model.state_dict()[name])
    assert torch.allclose(after[name] - before[name], torch.full_like(before[name], 0.01), atol=1e-5)


@pytest.mark.slow  # a real training run or a server stopped and started
def test_an_endpoint_that_stays_down_is_one_line_and_the_last_version_stays(on_flaky_s3, model, tiny_model_dir,
                                                                           tmp_path, monkeypatch):
    publisher = FolderPublisher("s3://chaos/down", str(tiny_model_dir), keep=4)
    v1 = publisher.publish(model, 1)
    kept = weights_of(v1, tmp_path)
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "3")  # 1 + 2 s of backoff, then give up
    on_flaky_s3.stop()
    try:
        nudge(model)
        with pytest.raises(UserError) as err:
            publisher.publish(model, 2)
    finally:
        on_flaky_s3.start()
    message = str(err.value)
    assert "\n" not in message and message.startswith("'s3://chaos/down/weights/v2'")
    assert "unreachable after 3 attempts" in message
    assert not exists("s3://chaos/down/weights/v2/config.json")  # never looks whole to a reader
    again = weights_of(v1, tmp_path / "again")
    assert all(torch.equal(again[k], kept[k]) for k in kept)


def test_the_retry_policy(monkeypatch):
    from pipelines.storage import attempts, backoff

    assert backoff(7) == [1, 2, 4, 8, 16, 16] and backoff(1) == []
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "0")
    with pytest.raises(UserError, match="AWS_MAX_ATTEMPTS='0': must be a positive whole number"):
        attempts()
