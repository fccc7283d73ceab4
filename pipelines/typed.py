"""The base of every config section: frozen, unknown keys rejected. Imports nothing of ours,
so each stage's config module can use it without import cycles."""

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, protected_namespaces=())
