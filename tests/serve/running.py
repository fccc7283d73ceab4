"""The app as the serve tests run it: a local Ray of 2 CPUs (tests.support.local_ray), the app on
a free port, a client that carries the bearer token."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support import free_port, local_ray


@contextmanager
def running_app(cfg, token: str) -> Iterator[str]:
    """The app started on `cfg` behind `token`; yields its URL and stops it (and Ray) after."""
    from pipelines.serve import app

    os.environ["MEMAGENT_SERVE_TOKEN"] = token
    try:
        with local_ray():
            try:
                yield app.start(cfg, port=free_port())
            finally:
                app.stop(cfg)
    finally:
        os.environ.pop("MEMAGENT_SERVE_TOKEN", None)


@contextmanager
def token_client(url: str, token: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=300) as c:
        yield c
