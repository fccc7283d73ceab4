"""Model references: their kinds, how a remote actor sees one, the registry grammar."""

from __future__ import annotations

import os

import pytest

from pipelines.errors import UserError
from pipelines.models import absolute_ref, check_remote_ref, kind_of, parse_registry_ref
from pipelines.models.refs import RegistryRef
from pipelines.storage import absolute_uri


@pytest.mark.parametrize("ref,kind", [("smollm2", "store"), ("ckpt/v1", "folder"), ("/abs/m", "folder"),
                                      ("s3://b/m", "s3"), ("models:/m/3", "registry")])
def test_kind_of(ref, kind):
    assert kind_of(ref) == kind


def test_absolute_ref_only_changes_local_folders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert absolute_ref("ckpt/v1") == str(tmp_path / "ckpt" / "v1")
    assert absolute_ref("~/m") == os.path.expanduser("~/m")
    for ref in ("smollm2", "s3://b/m", "models:/m@champion", "/abs/m"):
        assert absolute_ref(ref) == ref
    assert absolute_uri("out/x") == str(tmp_path / "out" / "x")
    assert absolute_uri("file:///x") == "file:///x"


def test_parse_registry_ref():
    assert parse_registry_ref("models:/m/3") == RegistryRef("m", "3", None)
    assert parse_registry_ref("models:/m/latest") == RegistryRef("m", "latest", None)
    assert parse_registry_ref("models:/m@champion") == RegistryRef("m", None, "champion")
    with pytest.raises(UserError, match="expected models:/NAME/VERSION"):
        parse_registry_ref("models:/m")


def test_check_remote_ref(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    (tmp_path / "m" / "model.safetensors").write_bytes(b"")
    assert check_remote_ref("m") == str(tmp_path / "m")
    assert check_remote_ref("models:/m/1") == "models:/m/1"
    with pytest.raises(UserError, match="model 'nope': no such folder"):
        check_remote_ref("nope")
