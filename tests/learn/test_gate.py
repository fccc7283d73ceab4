"""The continuous-training gate's registration on a real MLflow registry (sqlite): a round
registered while the name has a @production becomes @candidate and leaves @production alone;
with --promote it moves @production to itself; the same round registered again (a restart) is
found by its run's tag instead of being added twice."""

from __future__ import annotations

from mlflow import MlflowClient

from pipelines.config import load_config
from pipelines.learn.gate import register
from pipelines.models.registry import register_model

NAME = "gate-test"


def round_of(key: str, model: str, alias: str) -> dict:
    return {"key": key, "gain": (0.25, 0.1, 0.4, 16), "sub_em": 0.75, "heldout_n": 16, "n": 1, "folder": "/rounds/1",
            "steps": 3, "base": model, "model": model, "alias": alias}


def test_candidate_then_promote_moves_production_once(tmp_path, tiny_model_dir):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    cfg = load_config(overrides=[f"home={tmp_path}", f"track.tracking_uri={uri}", f"learn.registry_name={NAME}"])
    register_model(tiny_model_dir, NAME, tmp_path, cfg.track, alias="production")  # version 1, the incumbent
    client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    held = register(cfg, round_of("round-a", str(tiny_model_dir), "candidate"), None, promote=False)
    assert held == f"models:/{NAME}/2"
    aliases = client.get_registered_model(NAME).aliases
    assert aliases == {"production": 1, "candidate": 2}

    promoted = register(cfg, round_of("round-b", str(tiny_model_dir), "candidate"), None, promote=True)
    assert promoted == f"models:/{NAME}/3"
    assert client.get_registered_model(NAME).aliases == {"production": 3, "candidate": 3}
    run = client.get_run(client.get_model_version(NAME, "3").run_id)  # the version's lineage: the round's run
    assert run.data.tags["continuous_round"] == "round-b" and run.data.metrics["heldout_gain"] == 0.25
    # the same round registered again (a restart) is found, not added
    assert register(cfg, round_of("round-b", str(tiny_model_dir), "candidate"), None, promote=True) == promoted
    assert len(client.search_model_versions(f"name = '{NAME}'")) == 3
