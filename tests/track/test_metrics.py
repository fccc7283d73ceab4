"""Metric names: one family per stage, and the rollout stage emits exactly the declared names."""

from pipelines.track import metrics as M


def test_every_name_is_stage_prefixed_and_unique():
    names = [*M.INGEST, *M.ROLLOUT, *M.GATE, *M.TRAIN, *M.SERVE]
    assert len(names) == len(set(names))
    for family, stage in ((M.INGEST, "ingest"), (M.ROLLOUT, "rollout"), (M.GATE, "gate"), (M.TRAIN, "train"),
                          (M.SERVE, "serve")):
        assert all(n.split("/")[0] == stage and n.count("/") == 1 for n in family)


def test_reserved_training_names_from_the_issue():
    for name in ("kl", "clip_low", "clip_high", "lr", "grad_norm", "tokens_per_s", "weight_push_s"):
        assert f"train/{name}" in M.TRAIN


def test_eval_metric_names():
    assert M.eval_metric("hotpotqa", "8K", "sub_em") == "eval/hotpotqa/8K/sub_em"
    assert M.eval_metric("hotpotqa", "8K", "f1", "truncation") == "eval/hotpotqa/8K/truncation/f1"
    assert M.eval_length_metric("hotpotqa", "strict") == "eval/hotpotqa/by_length/strict"
    assert M.eval_length_metric("hotpotqa", "f1", "full") == "eval/hotpotqa/by_length/full/f1"


def test_rollout_metrics_use_only_declared_names():
    from pipelines.rollout.metrics import rollout_metrics

    assert M.check_names(rollout_metrics([]), M.ROLLOUT + M.GATE) == []
    assert sorted(rollout_metrics([])) == sorted(M.ROLLOUT + M.GATE)
    assert M.check_names(["rollout/reward_mean", "rollout/typo"], M.ROLLOUT) == ["rollout/typo"]
