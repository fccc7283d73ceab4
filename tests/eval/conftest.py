"""The ladder's fixtures: a needle dataset (its end-to-end tests share tests/conftest.py's
ray_session, which the ladder reuses instead of starting its own Ray)."""

from __future__ import annotations

import pytest

from tests.eval.needles import write_needle_dataset


@pytest.fixture(scope="session")
def needle_dataset(tmp_path_factory, tokenizer) -> str:
    return write_needle_dataset(tmp_path_factory.mktemp("tasks"), tokenizer)


