"""Small JSON state files (job state, current model version) on local disk or S3.

A local write goes to a temporary name and is renamed, and an S3 object appears only
when its upload completes, so a reader never sees half a file.
"""

from __future__ import annotations

import json

import pyarrow.fs as pafs

from pipelines.storage import resolve, write_whole


def join(base: str, *parts: str) -> str:
    return "/".join([base.rstrip("/"), *parts])


def read_json(uri: str) -> dict | None:
    fs, path = resolve(uri)
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read().decode())


def write_json(uri: str, data: dict) -> None:
    write_whole(uri, json.dumps(data, indent=1, sort_keys=True).encode())


def model_state_uri(state_dir: str) -> str:
    return join(state_dir, "model.json")


def read_model_state(state_dir: str) -> tuple[str, int] | None:
    """(model ref, version) of the last reload, so a restarted replica serves the same one."""
    data = read_json(model_state_uri(state_dir))
    return (data["model"], int(data["version"])) if data else None


def write_model_state(state_dir: str, model: str, version: int) -> None:
    write_json(model_state_uri(state_dir), {"model": model, "version": version})
