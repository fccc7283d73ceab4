"""Listing a source (s3://bucket/prefix, a local folder, a file or a glob) into objects."""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass

import pyarrow.fs as pafs

from pipelines.errors import UserError
from pipelines.storage import first_line, is_s3, resolve

WILDCARDS = "*?["


@dataclass(frozen=True)
class SourceObject:
    uri: str       # full URI: s3://bucket/key or an absolute local path
    rel: str       # key relative to the source root; the default document id
    size: int
    version: str   # size + mtime: changes when the object is rewritten
    fmt: str       # text | jsonl | parquet


def object_format(name: str) -> str | None:
    name = name.lower()
    if name.endswith((".txt", ".md")):
        return "text"
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return None


def split_glob(uri: str) -> tuple[str, str | None]:
    """('s3://b/data', 'x/*.jsonl') for 's3://b/data/x/*.jsonl'; (uri, None) without wildcards."""
    cut = min((uri.find(c) for c in WILDCARDS if c in uri), default=-1)
    if cut < 0:
        return uri, None
    root = uri[:cut].rsplit("/", 1)[0]
    return root, uri[len(root) + 1:]


def glob_regex(pattern: str) -> re.Pattern:
    """Shell-style: '*' and '?' stay within one path segment, '**/' spans folders."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 1:]:
            end = pattern.index("]", i + 1)
            out.append(pattern[i:end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def _uri(path: str, s3: bool) -> str:
    return f"s3://{path}" if s3 else path


def _entry(info: pafs.FileInfo, root: str, s3: bool) -> tuple[str, SourceObject | None]:
    rel = info.path[len(root):].lstrip("/") or posixpath.basename(info.path)
    mtime = info.mtime_ns if info.mtime_ns is not None else 0
    fmt = object_format(rel)
    obj = SourceObject(_uri(info.path, s3), rel, info.size or 0, f"{info.size}-{mtime}", fmt or "")
    return rel, obj


def list_sources(uri: str, patterns: tuple[str, ...]) -> tuple[list[SourceObject], list[str]]:
    """(objects to ingest, keys skipped because no pattern or format matched), sorted by key."""
    root_uri, glob = split_glob(str(uri).rstrip("/"))
    fs, root = resolve(root_uri)
    s3 = is_s3(root_uri)
    try:
        top = fs.get_file_info(root)
        if top.type == pafs.FileType.File:
            infos, root = [top], posixpath.dirname(root)
        else:
            infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except OSError as e:
        raise UserError(f"source '{uri}': cannot list ({first_line(e)})") from None
    objects, skipped = [], []
    matcher = glob_regex(glob) if glob else None
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pafs.FileType.File or info.path.endswith("/"):
            continue
        rel, obj = _entry(info, root, s3)
        if matcher and not matcher.match(rel):
            continue
        name = posixpath.basename(rel)
        if obj.fmt and any(fnmatch.fnmatch(name, p) for p in patterns):
            objects.append(obj)
        else:
            skipped.append(obj.uri)
    if not objects and not skipped:
        raise UserError(f"source '{uri}': no such file, folder or prefix, or it is empty")
    return objects, skipped
