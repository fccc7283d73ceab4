"""The `data:` config section: where the chunk store is, and the one rule that picks the store a
stage reads."""

from __future__ import annotations

from typing import Any

from pipelines.storage import absolute_uri
from pipelines.typed import Strict


class DataConfig(Strict):
    # The chunk store (local folder or s3://bucket/prefix): where `memagent ingest` and `data
    # build/import` put documents when --store is not given, and where rollout, eval, training
    # and serving read the documents of doc_id rows. serve.store may override it for serving.
    store: str = ".memagent/store"


def store_uri(cfg: Any, serving: bool = False) -> str:
    """The chunk store a stage reads: data.store, or for the Serve app (and its batch runner)
    serve.store when it is set. A relative local path is made absolute here, on the driver,
    where the working directory is the user's."""
    return absolute_uri((cfg.serve.store if serving else None) or cfg.data.store)
