"""Fixtures of the ingest tests."""

import pytest


@pytest.fixture(scope="module")
def count(tokenizer):
    """The model's token count of a text, as the builders count it."""
    backend = tokenizer.backend_tokenizer
    return lambda text: len(backend.encode(text, add_special_tokens=False).ids)
