import pytest

from pipelines.errors import UserError
from pipelines.storage import read_text_blocks


def test_multibyte_characters_split_across_blocks(tmp_path):
    text = "héllo wörld ✓ " * 100
    (tmp_path / "u.txt").write_text(text)
    blocks = list(read_text_blocks(str(tmp_path / "u.txt"), block_size=7))
    assert "".join(blocks) == text


def test_file_uri_and_errors(tmp_path):
    (tmp_path / "a.txt").write_text("abc")
    assert "".join(read_text_blocks(f"file://{tmp_path / 'a.txt'}")) == "abc"
    with pytest.raises(UserError, match="is a directory"):
        list(read_text_blocks(str(tmp_path)))
    (tmp_path / "nul.txt").write_bytes(b"abc\x00def")
    with pytest.raises(UserError, match="binary content"):
        list(read_text_blocks(str(tmp_path / "nul.txt")))
