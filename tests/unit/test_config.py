import pytest

from pipelines.config import load_config
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
])
def test_bad_config_is_one_named_line(override, needle):
    with pytest.raises(UserError) as e:
        load_config(None, [override])
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        load_config(tmp_path / "none.yaml")
