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
