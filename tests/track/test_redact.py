"""Secret redaction: pure function, hand-written inputs."""

import logging

from pipelines.track.redact import MASK, RedactingFilter, env_secrets, flatten, redact, redact_params


def test_password_in_uri_is_masked_user_and_host_kept():
    assert redact("postgresql://bob:hunter22@db.local:5432/mlflow") == f"postgresql://bob:{MASK}@db.local:5432/mlflow"
    assert redact("http://u:p%40ss@h/x") == f"http://u:{MASK}@h/x"


def test_uri_without_password_is_unchanged():
    for text in ("s3://bucket/prefix/a.parquet", "http://127.0.0.1:5000", "sqlite:////tmp/mlflow.db",
                 "user@example.com", "chunk_size=1024"):
        assert redact(text) == text


def test_secret_query_parameters_and_key_values():
    assert redact("https://h/x?token=abc123&page=2") == f"https://h/x?token={MASK}&page=2"
    assert redact("X-Amz-Signature=deadbeef") == f"X-Amz-Signature={MASK}"
    assert redact("AWS_SECRET_ACCESS_KEY=zzz9 next") == f"AWS_SECRET_ACCESS_KEY={MASK} next"
    assert redact('{"api_key": "sk-1"}') == f'{{"api_key": "{MASK}"}}'
    assert redact("password: p4ss") == f"password: {MASK}"


def test_aws_access_key_id_and_known_values():
    assert redact("key AKIAABCDEFGHIJKLMNOP used") == f"key {MASK} used"
    assert redact("failed with memagent-secret in body", ["memagent-secret"]) == f"failed with {MASK} in body"
    assert redact("ab is short", ["ab"]) == "ab is short"  # too short to be a secret: no mangling


def test_env_secrets_picks_secret_looking_names():
    env = {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "AWS_ACCESS_KEY_ID": "kid1", "MLFLOW_TRACKING_TOKEN": "tok1",
           "HOME": "/root", "AWS_REGION": "us-east-1", "EMPTY_TOKEN": "", "RAY_AUTH_MODE": "token"}
    assert sorted(env_secrets(env)) == ["s3cr3t", "tok1"]  # key ids: by pattern (AKIA...)


def test_redact_params_masks_secret_keys_and_values():
    params = flatten({"s3": {"endpoint_url": "http://u:pw1234@h:8333", "secret_key": "x"},
                      "agent": {"chunk_size": 1024}, "token": None})
    assert redact_params(params) == {"s3.endpoint_url": f"http://u:{MASK}@h:8333", "s3.secret_key": MASK,
                                     "agent.chunk_size": "1024", "token": "None"}


def test_log_filter_redacts_message_args(monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    record = logging.LogRecord("x", logging.WARNING, __file__, 1, "upload to %s failed: %s", (
        "s3://b/k", "signature mismatch for very-secret-value"), None)
    RedactingFilter().filter(record)
    assert record.getMessage() == f"upload to s3://b/k failed: signature mismatch for {MASK}"


def test_token_counts_and_tokenizers_are_not_secrets():
    text = "max_tokens=64 tokenizer=smollm2 doc_tokens: 4096 author=ann learn.token_budget=64"
    assert redact(text) == text
    assert redact_params({"agent.max_tokens": 64, "ingest.tokenizer": "smollm2"}) == {
        "agent.max_tokens": "64", "ingest.tokenizer": "smollm2"}
    assert redact("MLFLOW_TRACKING_TOKEN=abc1 HF_TOKEN: x2") == f"MLFLOW_TRACKING_TOKEN={MASK} HF_TOKEN: {MASK}"
