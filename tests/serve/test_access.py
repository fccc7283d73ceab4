"""The path rule on its own, no Ray: real files, symlinks, a fifo and a socket in tmp folders."""

import os
import socket

import pytest

from pipelines.config import load_config
from pipelines.serve.access import Access
from pipelines.serve.settings import allowed
from pipelines.serve.jobs import input_files
from pipelines.serve.schema import ServeError


@pytest.fixture
def tree(tmp_path):
    """root/ (allowed) with a doc, a link to a secret outside, a linked folder; outside/ with the secret."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "doc.txt").write_text("fine")
    (outside / "secret.txt").write_text("secret")
    (root / "link.txt").symlink_to(outside / "secret.txt")
    (root / "linkdir").symlink_to(outside)
    (root / "inner.txt").symlink_to(root / "doc.txt")
    return root, outside


def refused(rule: Access, uri: str, reason: str, status: int = 403) -> None:
    with pytest.raises(ServeError) as e:
        rule.check(uri, "uri")
    assert e.value.status == status and reason in str(e.value), str(e.value)
    assert str(e.value).startswith(f"uri '{uri}'") or status == 400


def test_local_paths_resolve_before_the_check(tree):
    root, outside = tree
    rule = Access.of([str(root)], [])
    assert rule.check(str(root / "doc.txt"), "uri") == str((root / "doc.txt").resolve())
    assert rule.check(f"{root}/sub/../doc.txt", "uri") == str((root / "doc.txt").resolve())
    assert rule.check(f"file://{root}/doc.txt", "uri") == str((root / "doc.txt").resolve())
    assert rule.check(str(root / "inner.txt"), "uri") == str((root / "doc.txt").resolve())  # a link within
    assert rule.check(str(root / "new" / "out"), "output") == str(root.resolve() / "new" / "out")
    for uri in [f"{root}/../outside/secret.txt", f"{root}/sub/../../outside/secret.txt", str(root / "link.txt"),
                str(root / "linkdir" / "secret.txt"), str(outside / "secret.txt"), "/etc/passwd",
                f"{root}/new/../../outside/x", f"{root}x/doc.txt"]:
        refused(rule, uri, "outside the allowed paths (serve.allowed_paths)")
    refused(rule, "doc.txt", "not an absolute path", 400)
    refused(rule, "http://example.com/a.txt", "only local paths and s3:// URIs")


def test_proc_devices_fifos_and_sockets_are_never_served(tree):
    root, _ = tree
    everything = Access.of(["/"], [])
    for uri, banned in [("/proc/self/environ", "/proc"), ("/sys/kernel", "/sys"), ("/dev/null", "/dev")]:
        refused(everything, uri, f"under {banned}, which is never served")
    (root / "to-proc").symlink_to("/proc/self/environ")
    refused(everything, str(root / "to-proc"), "under /proc")
    os.mkfifo(root / "fifo")
    refused(everything, str(root / "fifo"), "a fifo, which is never served")
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(root / "sock"))
        refused(everything, str(root / "sock"), "a socket, which is never served")
    refused(Access(), str(root / "doc.txt"), "outside the allowed paths")  # the empty rule allows nothing


def test_s3_uris_match_whole_prefix_segments():
    rule = Access.of([], ["s3://bucket/docs", "s3://open"])
    for uri in ["s3://bucket/docs/a.txt", "s3://bucket/docs", "s3://bucket/docs/", "s3://open/any/key"]:
        assert rule.check(uri, "uri") == uri
    for uri in ["s3://other/docs/a.txt", "s3://bucket/docs2/a.txt", "s3://bucket/a.txt", "s3://bucket"]:
        refused(rule, uri, "outside the allowed s3:// prefixes (serve.allowed_s3_prefixes)")
    for uri in ["s3://bucket/docs/../secret", "s3://bucket/docs//x", "s3:///docs"]:
        refused(rule, uri, "not a plain s3://bucket/key URI")


def test_an_input_folder_may_not_link_out(tree):
    root, outside = tree
    (root / "rows").mkdir()
    (root / "rows" / "a.jsonl").write_text("{}\n")
    assert [p for _, p in input_files(str(root / "rows"))] == [str(root / "rows" / "a.jsonl")]
    (outside / "b.jsonl").write_text("{}\n")
    (root / "rows" / "b.jsonl").symlink_to(outside / "b.jsonl")
    with pytest.raises(ServeError, match="b.jsonl' links outside the folder") as e:
        input_files(str(root / "rows"))
    assert e.value.status == 403


def test_defaults_are_the_chunk_store_and_the_jobs_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MEMAGENT_HOME", str(tmp_path / "home"))
    assert allowed(load_config(overrides=[f"serve.store={tmp_path / 'store'}"])) == \
        ((str(tmp_path / "store"), str(tmp_path / "home" / "jobs")), ())
    assert allowed(load_config(overrides=["serve.store=s3://b/store"])) == \
        ((str(tmp_path / "home" / "jobs"),), ("s3://b/store",))
    assert allowed(load_config(overrides=["data.store=s3://b/chunks"]))[1] == ("s3://b/chunks",)
    assert allowed(load_config(overrides=["serve.allowed_paths=[]", "serve.allowed_s3_prefixes=[s3://x]"])) == \
        ((), ("s3://x",))
