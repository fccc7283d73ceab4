"""Servers a chaos test may stop and start again: each test module gets its own, never the
session's (tests/conftest.py), so an outage here cannot fail a test elsewhere."""

from __future__ import annotations

import threading
import time

import pytest

from infra.seaweedfs import SeaweedFS


@pytest.fixture(scope="module")
def flaky_s3(tmp_path_factory):
    """A SeaweedFS of this module's own, with a bucket `chaos`."""
    server = SeaweedFS(tmp_path_factory.mktemp("flaky-s3")).start()
    server.create_bucket("chaos")
    yield server
    server.stop()


@pytest.fixture
def on_flaky_s3(flaky_s3, monkeypatch):
    """This process's S3 calls go to flaky_s3 for the test."""
    for k, v in flaky_s3.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return flaky_s3


def outage(server, seconds: float) -> threading.Thread:
    """Stop `server` now and start it again on the same port after `seconds`, in the background;
    join the thread to wait for it to be back."""
    server.stop()
    thread = threading.Thread(target=lambda: (time.sleep(seconds), server.start()), daemon=True)
    thread.start()
    return thread
