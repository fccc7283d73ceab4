import pytest

from pipelines.config import REPO_ROOT as REPO, load_config
from pipelines.errors import UserError


def test_local_defaults_and_overrides():
    cfg = load_config(None, ["agent.chunk_size=1024", "engine.kind=hf", "model.path=/x"])
    assert cfg.agent.chunk_size == 1024 and cfg.engine.kind == "hf" and cfg.model.path == "/x"
    assert cfg.agent.template == "release"


@pytest.mark.parametrize("override,needle", [
    ("agent.chunk_sise=5", "unknown key 'agent.chunk_sise'"),
    ("nope=1", "unknown key 'nope'"),
    ("agent.chunk_size=-1", "'agent.chunk_size'"),
    ("engine.kind=tpu", "'engine.kind'"),
    ("agent.chunk_size", "expected key=value"),
    ("ingest.store=s3://b/st", "'ingest.store' is gone; the chunk store is 'data.store' now"),
    ("rollout.store=st", "'rollout.store' is gone; the chunk store is 'data.store' now"),
    ("eval.store=st", "'eval.store' is gone; the chunk store is 'data.store' now"),
])
def test_bad_config_is_one_named_line(override, needle):
    with pytest.raises(UserError) as e:
        load_config(None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_one_chunk_store_which_serving_may_override(monkeypatch, tmp_path):
    from pipelines.data.config import store_uri

    monkeypatch.chdir(tmp_path)
    cfg = load_config(None, ["data.store=st"])
    assert store_uri(cfg) == store_uri(cfg, serving=True) == str(tmp_path / "st")
    served = load_config(None, ["data.store=st", "serve.store=s3://b/sv"])
    assert (store_uri(served), store_uri(served, serving=True)) == (str(tmp_path / "st"), "s3://b/sv")


def test_missing_config_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_config(tmp_path / "none.yaml")


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "pipelines" / "configs").glob("*.yaml")))
def test_every_preset_loads_and_validates(name):
    cfg = load_config(REPO / "pipelines" / "configs" / name)
    assert cfg.agent.memory_budget > 0 and cfg.learn.steps > 0


def test_a_preset_states_only_what_it_changes(tmp_path):
    (tmp_path / "base.yaml").write_text("agent:\n  chunk_size: 300\n  memory_budget: 40\nlearn:\n  lr: 0.1\n")
    (tmp_path / "child.yaml").write_text("base: base.yaml\nagent:\n  memory_budget: 50\n")
    cfg = load_config(tmp_path / "child.yaml", ["learn.lr=0.2"])
    assert (cfg.agent.chunk_size, cfg.agent.memory_budget, cfg.learn.lr) == (300, 50, 0.2)
    (tmp_path / "loop.yaml").write_text("base: loop.yaml\n")
    with pytest.raises(UserError, match="loops"):
        load_config(tmp_path / "loop.yaml")
