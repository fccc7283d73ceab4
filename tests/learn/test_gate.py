"""The continuous-training gate: its verdict on hand-made paired scores, and its registration on
a real MLflow registry (sqlite): a round registered while the name has a @production becomes @candidate and leaves @production alone;
with --promote it moves @production to itself; the same round registered again (a restart) is
found by its run's tag instead of being added twice."""

from __future__ import annotations

from mlflow import MlflowClient

from pipelines.config import load_config
from pipelines.learn.gate import register, verdict
from pipelines.models.registry import register_model

NAME = "gate-test"


def rows(*scores: float) -> dict[str, float]:
    return {f"row-{i}": s for i, s in enumerate(scores)}


def test_verdict_keeps_the_incumbent_unless_the_interval_clears_the_margin():
    sft = rows(*[1.0] * 20, *[0.0] * 4)
    # RL not better: loses 3 rows SFT had, wins 1 -> mean -2/24, keep SFT
    worse = rows(*[1.0] * 17, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)
    v = verdict(sft, worse, 0.0)
    assert not v.better and v.gain == -2 / 24 and v.n == 24 and "does not clear" in v.why
    # the same answers: gain 0 [0, 0], which does not clear a margin of 0
    assert not verdict(sft, dict(sft), 0.0).better
    # a mean gain above the margin whose interval reaches below it (2 of 24 rows won, none lost)
    lucky = verdict(sft, rows(*[1.0] * 22, 0.0, 0.0), 0.02)
    assert lucky.gain > 0.02 and lucky.lo < 0.02 and not lucky.better
    # RL clearly better: wins 12 of the 24 rows, loses none -> 0.5 [0.29, 0.71]
    clear = verdict(rows(*[0.0] * 24), rows(*[1.0] * 12, *[0.0] * 12), 0.02)
    assert clear.better and clear.lo > 0.02 and "clears the margin" in clear.why
    assert clear.paired == [0.5, clear.lo, clear.hi, 24]
    # paired over the shared rows only; none shared: no verdict for the newcomer
    assert verdict(rows(1.0), {"other": 1.0}, 0.0).n == 0 and not verdict(rows(1.0), {"other": 1.0}, 0.0).better


def round_of(key: str, model: str, alias: str) -> dict:
    return {"key": key, "gain": (0.25, 0.1, 0.4, 16), "strict": 0.75, "heldout_n": 16, "n": 1, "folder": "/rounds/1",
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


def test_held_out_rows_must_share_no_sample_and_no_document_with_the_training_rows():
    from pipelines.data.tasks import TaskRow
    from pipelines.learn.gate import shared_row

    def row(sid: str, doc: str | None = None, text: str | None = "a text") -> TaskRow:
        return TaskRow(sid, "q?", ["a"], "one_of", doc, None if doc else text, 3, "t", "train")

    heldout = [row("h1", text="held-out text"), row("h2", doc="d7")]
    assert shared_row(heldout, [row("t1", text="other text"), row("t2", doc="d8")]) is None
    assert shared_row(heldout, [row("t1", text="other"), row("h1", text="new")]) == "sample 'h1'"
    assert shared_row(heldout, [row("t3", doc="d7")]) == "the document of sample 't3'"
    assert shared_row(heldout, (r for r in [row("t4", text="held-out text")])) == "the document of sample 't4'"
