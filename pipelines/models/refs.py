"""What a model reference is, and how another process (a Ray actor elsewhere) must see it.

  smollm2                 a name in the store (built-ins are imported on first use)
  /path/to/hf-folder      any HF model folder (config.json + weights)
  s3://bucket/prefix      an HF folder in object storage (cached under the home)
  models:/NAME/VERSION    a registered MLflow version; also models:/NAME/latest, models:/NAME@ALIAS
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pipelines.errors import UserError
from pipelines.models.store import BUILTINS
from pipelines.storage import absolute_uri, is_s3

Kind = Literal["store", "folder", "s3", "registry"]
REGISTRY_PREFIX = "models:/"
_REGISTRY = re.compile(r"^models:/(?P<name>[^/@]+)(?:/(?P<version>\d+|latest)|@(?P<alias>[\w.-]+))$")


def kind_of(ref: str) -> Kind:
    if is_s3(ref):
        return "s3"
    if ref.startswith(REGISTRY_PREFIX):
        return "registry"
    return "store" if ref in BUILTINS else "folder"


def absolute_ref(ref: str) -> str:
    """The same reference for a process with another working directory: a local folder made
    absolute (storage.absolute_uri); store names and URIs unchanged."""
    return absolute_uri(ref) if kind_of(ref) == "folder" else ref


@dataclass(frozen=True)
class RegistryRef:
    name: str
    version: str | None  # a number or "latest"
    alias: str | None


def parse_registry_ref(ref: str) -> RegistryRef:
    """models:/NAME/VERSION | models:/NAME/latest | models:/NAME@ALIAS, else a one-line error."""
    m = _REGISTRY.match(ref.strip())
    if not m:
        raise UserError(f"model '{ref}': expected models:/NAME/VERSION, models:/NAME/latest or models:/NAME@ALIAS")
    return RegistryRef(m.group("name"), m.group("version"), m.group("alias"))
