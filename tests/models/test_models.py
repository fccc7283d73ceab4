"""Model references: the store, local folders, s3:// folders in a real SeaweedFS."""

import pytest

from pipelines.errors import UserError
from pipelines.models import resolve_model
from pipelines.storage import resolve


def test_store_name_resolves_to_hf_folder(smollm2_dir, home):
    assert resolve_model("smollm2", home) == smollm2_dir
    assert (smollm2_dir / "config.json").is_file() and (smollm2_dir / "model.safetensors").is_file()


def test_s3_model_folder_is_downloaded_and_cached(s3, tiny_model_dir, tmp_path):
    fs, root = resolve("s3://memagent-test/models/tiny")
    for f in tiny_model_dir.iterdir():
        with fs.open_output_stream(f"{root}/{f.name}") as out:
            out.write(f.read_bytes())
    local = resolve_model("s3://memagent-test/models/tiny", tmp_path)
    assert sorted(p.name for p in local.iterdir()) == sorted(p.name for p in tiny_model_dir.iterdir())
    assert (local / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()
    from transformers import AutoModelForCausalLM

    assert AutoModelForCausalLM.from_pretrained(local).config.num_hidden_layers == 2


def test_missing_s3_model_is_named(s3, tmp_path):
    with pytest.raises(UserError, match="s3://memagent-test/models/none"):
        resolve_model("s3://memagent-test/models/none", tmp_path)


def test_a_built_in_asked_for_at_once_is_imported_once(tmp_path, monkeypatch):
    """Commands starting together on a fresh machine: one imports, the rest wait
    and get the same folder whole."""
    import threading
    import time

    from pipelines.models import store

    imports = []

    def slow_import(home):
        imports.append(home)
        dest = store.store_dir(home) / "fake"
        time.sleep(0.5)  # long enough for every other caller to arrive
        dest.mkdir(parents=True)
        (dest / "config.json").write_text("{}")

    monkeypatch.setitem(store.BUILTINS, "fake", slow_import)
    got = []
    threads = [threading.Thread(target=lambda: got.append(store.store_model("fake", tmp_path))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(imports) == 1 and got == [tmp_path / "models" / "fake"] * 4
    assert (got[0] / "config.json").is_file()
