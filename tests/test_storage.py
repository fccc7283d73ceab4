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


def test_staged_dir_appears_whole_or_not_at_all(tmp_path):
    from pipelines.storage import located, staged_dir

    dest = tmp_path / "weights" / "v1"
    with staged_dir(str(dest)) as d:
        (d / "model.safetensors").write_bytes(b"x" * 10)
        assert not dest.exists()  # nothing at the destination while it is being written
    assert (dest / "model.safetensors").read_bytes() == b"x" * 10
    assert located(f"file://{dest}") == str(dest)
    with pytest.raises(RuntimeError), staged_dir(str(dest)) as d:
        (d / "half").write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(p.name for p in dest.iterdir()) == ["model.safetensors"]  # the old version stays
    assert [p.name for p in dest.parent.iterdir()] == ["v1"]  # no .part folder left behind


def test_write_whole_survives_a_kill_mid_write(tmp_path):
    """A process killed while it rewrites a file (the RL history, a job's state) leaves the last
    whole version, never a truncated one (CI once lost a run's first step to that)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    target, size = tmp_path / "history.jsonl", 4 << 20
    loop = ("import sys\nfrom pipelines.storage import write_whole\ni = 0\n"
            f"while True:\n    i += 1\n    write_whole(sys.argv[1], bytes([48 + i % 10]) * {size})\n")
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", loop, str(target)])
        while not target.exists():
            time.sleep(0.01)
        time.sleep(0.3)
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        data = target.read_bytes()
        assert len(data) == size and data == data[:1] * size
    leftovers = [p.name for p in tmp_path.iterdir() if p != target]
    # A killed write leaves only its temporary file (storage.aside's name), never a half target.
    assert all(name.startswith(".history.jsonl.") and name.endswith(".part") for name in leftovers), leftovers


def test_written_replaces_the_file_whole_or_leaves_it(tmp_path):
    import pyarrow.fs as pafs

    from pipelines.storage import written

    fs, target = pafs.LocalFileSystem(), tmp_path / "sub" / "part-00000.parquet"
    with written(fs, str(target)) as aside:
        assert aside != str(target) and aside.endswith(".part") and "/sub/.part-00000.parquet." in aside
        open(aside, "w").write("v1")
        assert not target.exists()  # nothing at the target while it is being written
    assert target.read_text() == "v1"
    with pytest.raises(RuntimeError), written(fs, str(target)) as aside:
        open(aside, "w").write("half")
        raise RuntimeError("failed mid-write")
    assert target.read_text() == "v1" and [p.name for p in target.parent.iterdir()] == [target.name]


def test_a_key_or_reference_cannot_write_outside_its_folder(tmp_path):
    from pipelines.errors import UserError
    from pipelines.storage import inside

    assert inside(tmp_path, "a/b.json", "object") == (tmp_path / "a" / "b.json").resolve()
    assert inside(tmp_path, "/a/b.json", "object") == (tmp_path / "a" / "b.json").resolve()
    for bad in ("../x", "a/../../x", "a/../../../etc/passwd"):
        with pytest.raises(UserError, match="lies outside"):
            inside(tmp_path / "cache", bad, "model")


def test_a_download_refuses_a_key_that_climbs_out(tmp_path):
    from pipelines.errors import UserError
    from pipelines.models.resolve import resolve_model

    with pytest.raises(UserError, match=r"model '.*\.\./.*': lies outside"):
        resolve_model("s3://bucket/../../../../tmp/evil", tmp_path)
