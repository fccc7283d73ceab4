"""Where serve may read and write: local paths under allowed roots, s3:// URIs under allowed prefixes.

    rule = Access.of(["/data/store", "~/jobs"], ["s3://corpus/docs"])
    rule.check("/data/store/../../etc/passwd", "uri")   # ServeError 403: outside the allowed paths
    rule.check("s3://corpus/docs/a.txt", "uri")          # -> "s3://corpus/docs/a.txt"

A local path is judged by where it really is: `..` and every symlink are resolved first,
and the resolved path is what the caller then opens. /proc, /sys and /dev, devices, sockets
and fifos are refused whatever the roots say. A prefix matches whole path segments:
`s3://b/docs` allows `s3://b/docs/x`, not `s3://b/docs2/x`.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from pipelines.serve.schema import ServeError

NEVER = ("/proc", "/sys", "/dev")
HINT = "serve.allowed_paths"
S3_HINT = "serve.allowed_s3_prefixes"


def real(path: str) -> str:
    """The path after `~`, `..` and symlinks (a missing tail is normalized as written)."""
    return os.path.realpath(os.path.expanduser(path))


def under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def special_kind(path: str) -> str | None:
    """'a socket', 'a fifo', 'a device' for such files; None for files, folders and missing paths."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISFIFO(mode):
        return "a fifo"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return None


def check_local(path: str, roots: tuple[str, ...], name: str) -> str:
    """The resolved path if it lies under one of `roots` (themselves resolved now), else ServeError 403."""
    given = path
    path = path.removeprefix("file://")
    if "\x00" in path:
        raise ServeError(f"{name} {given!r}: NUL byte in the path", 400)
    if not os.path.isabs(os.path.expanduser(path)):
        raise ServeError(f"{name} '{given}': not an absolute path", 400)
    resolved = real(path)
    banned = next((n for n in NEVER if under(resolved, n)), None)
    if banned:
        raise ServeError(f"{name} '{given}': under {banned}, which is never served", 403)
    if not any(under(resolved, real(root)) for root in roots):
        raise ServeError(f"{name} '{given}': outside the allowed paths ({HINT})", 403)
    kind = special_kind(resolved)
    if kind:
        raise ServeError(f"{name} '{given}': {kind}, which is never served", 403)
    return resolved


def split_s3(uri: str, name: str) -> tuple[str, list[str]]:
    """(bucket, key segments) of an s3:// URI; `.`, `..` and empty segments are refused."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    parts = key.rstrip("/").split("/") if key.rstrip("/") else []
    if not bucket or any(p in ("", ".", "..") for p in parts):
        raise ServeError(f"{name} '{uri}': not a plain s3://bucket/key URI", 403)
    return bucket, parts


def check_s3(uri: str, prefixes: tuple[str, ...], name: str) -> str:
    bucket, parts = split_s3(uri, name)
    for prefix in prefixes:
        p_bucket, p_parts = split_s3(prefix, S3_HINT)
        if p_bucket == bucket and parts[:len(p_parts)] == p_parts:
            return uri
    raise ServeError(f"{name} '{uri}': outside the allowed s3:// prefixes ({S3_HINT})", 403)


def check_model(ref: str, access: Access, names: tuple[str, ...]) -> str:
    """A reload's model reference, confined like every other input: registry and store names on the
    list (serve.allowed_models), folders and s3:// prefixes where the Access rule allows."""
    from pipelines.models.refs import kind_of, parse_registry_ref

    kind = kind_of(ref)
    if kind in ("folder", "s3"):
        access.check(ref, "model")
        return ref
    name = parse_registry_ref(ref).name if kind == "registry" else ref
    if name not in names:
        raise ServeError(f"model '{ref}': not a model a reload may name (serve.allowed_models)", 403)
    return ref


def reload_names(served: str, allowed: tuple[str, ...] | None) -> tuple[str, ...]:
    """serve.allowed_models, or by default the served model's registry name and the built-ins."""
    from pipelines.models.refs import kind_of, parse_registry_ref
    from pipelines.models.store import BUILTINS

    if allowed is not None:
        return tuple(allowed)
    own = (parse_registry_ref(served).name,) if kind_of(served) == "registry" else ()
    return (*own, *BUILTINS)


@dataclass(frozen=True)
class Access:
    """The rule one app applies to every path it is handed. The empty rule allows nothing."""

    roots: tuple[str, ...] = ()
    s3_prefixes: tuple[str, ...] = ()

    @classmethod
    def of(cls, roots, s3_prefixes) -> Access:
        return cls(tuple(roots or ()), tuple(s3_prefixes or ()))

    def check(self, uri: str, name: str) -> str:
        """The URI to open (a local path resolved), or ServeError naming `name` and the reason."""
        uri = str(uri)
        if uri.startswith("s3://"):
            return check_s3(uri, self.s3_prefixes, name)
        if "://" in uri and not uri.startswith("file://"):
            raise ServeError(f"{name} '{uri}': only local paths and s3:// URIs are served", 403)
        return check_local(uri, self.roots, name)

    def allows(self, uri: str) -> bool:
        try:
            self.check(uri, "path")
        except ServeError:
            return False
        return True
