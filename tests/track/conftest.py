"""A real MLflow tracking server: sqlite backend, artifact root in the session's SeaweedFS S3."""

from __future__ import annotations

import pytest

from infra.mlflow_server import MlflowServer


@pytest.fixture(scope="session")
def mlflow_server(s3, tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("mlflow"), "s3://memagent-test/mlflow-artifacts",
                          env=s3.env()).start()
    yield server
    server.stop()


@pytest.fixture
def tracking_env(mlflow_server, monkeypatch):
    """MLFLOW_TRACKING_URI (and the S3 artifact endpoint) pointing at the test server."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", mlflow_server.env["AWS_ENDPOINT_URL"])
    return mlflow_server.uri


@pytest.fixture(scope="session")
def needle_dataset(tmp_path_factory, tokenizer) -> str:
    from tests.eval.needles import write_needle_dataset

    return write_needle_dataset(tmp_path_factory.mktemp("tasks"), tokenizer)
