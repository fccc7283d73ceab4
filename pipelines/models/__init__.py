"""Model references: what one is (refs), the local store (store), resolving one to an HF
folder on this machine (resolve), the MLflow registry (registry), `memagent model` (command).

    config_model_dir(cfg)                   # cfg.model.path -> an absolute local HF folder
    absolute_ref("ckpt/v1")                 # as a Ray actor elsewhere must see it
"""

from pipelines.models.refs import absolute_ref, kind_of, parse_registry_ref
from pipelines.models.resolve import check_model_dir, check_remote_ref, config_model_dir, resolve_model
from pipelines.models.store import BUILTINS

__all__ = ["BUILTINS", "absolute_ref", "check_model_dir", "check_remote_ref", "config_model_dir", "kind_of",
           "parse_registry_ref", "resolve_model"]
