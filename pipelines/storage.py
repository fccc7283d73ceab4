"""One place that turns a URI (local path, file://, s3://) into a pyarrow filesystem.

S3 goes through pyarrow's S3FileSystem with an endpoint override, so the same code
reaches AWS, SeaweedFS or any S3-compatible store. Endpoint: the `s3.endpoint_url`
setting, else AWS_ENDPOINT_URL; keys from the standard AWS environment variables.

Writes and downloads to S3 ride out an endpoint that refuses for a while (a restarting gateway,
503s): one retry policy (`retried`), backoff 1, 2, 4, 8, 16, 16 ... s for AWS_MAX_ATTEMPTS
attempts (default 7: ~47 s of waiting), then one line naming the URI.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlparse

import pyarrow.fs as pafs

from pipelines.errors import UserError

BLOCK = 1 << 20
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")
T = TypeVar("T")
ATTEMPTS_ENV, DEFAULT_ATTEMPTS = "AWS_MAX_ATTEMPTS", 7  # an AWS_ variable: Ray workers get it too
FIRST_DELAY_S, MAX_DELAY_S = 1.0, 16.0
# pyarrow's names for the failures that pass (the endpoint down or overloaded), not bad requests
TRANSIENT = ("NETWORK_CONNECTION", "SERVICE_UNAVAILABLE", "SLOW_DOWN", "INTERNAL_FAILURE", "THROTTLING",
             "REQUEST_TIMEOUT")


def is_s3(uri: str) -> bool:
    return str(uri).startswith("s3://")


def absolute_uri(uri: str) -> str:
    """The same URI for a process with another working directory (Ray actors, replicas): a
    local path expanded and made absolute; anything with a scheme (s3://, file://, models:/)
    unchanged."""
    uri = str(uri)
    return uri if _SCHEME.match(uri) else str(Path(uri).expanduser().absolute())


def s3_filesystem(endpoint_url: str | None = None, region: str | None = None) -> pafs.S3FileSystem:
    endpoint = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    kwargs = dict(
        region=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        access_key=os.environ.get("AWS_ACCESS_KEY_ID"),
        secret_key=os.environ.get("AWS_SECRET_ACCESS_KEY"),
    )
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        kwargs.update(endpoint_override=parsed.netloc, scheme=parsed.scheme)
    return pafs.S3FileSystem(**{k: v for k, v in kwargs.items() if v is not None})


def attempts() -> int:
    """How many times an S3 write or download is tried: AWS_MAX_ATTEMPTS, else 7."""
    raw = os.environ.get(ATTEMPTS_ENV, "").strip()
    if not raw:
        return DEFAULT_ATTEMPTS
    if not raw.isdigit() or int(raw) < 1:
        raise UserError(f"{ATTEMPTS_ENV}={raw!r}: must be a positive whole number")
    return int(raw)


def backoff(n_attempts: int) -> list[float]:
    """The waits between n attempts: doubling from FIRST_DELAY_S, capped at MAX_DELAY_S."""
    return [min(FIRST_DELAY_S * 2 ** i, MAX_DELAY_S) for i in range(n_attempts - 1)]


def full_disk(err: BaseException | None) -> bool:
    """Whether a full disk is at the root of `err`, also under other libraries' wrappers (pyarrow's
    copies, safetensors' writer, Ray's task errors carry the OS's message, not always its errno)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if getattr(err, "errno", None) == errno.ENOSPC or "No space left on device" in str(err):
            return True
        err = getattr(err, "cause", None) or err.__cause__ or err.__context__
    return False


def no_space(where: str) -> UserError:
    return UserError(f"'{where}': no space left on device (what was there before is intact: free space, "
                     "then run again; a training run with --resume)")


def transient(err: BaseException) -> bool:
    return isinstance(err, OSError) and any(mark in str(err) for mark in TRANSIENT)


def retried(uri: str, call: Callable[[], T], sleep: Callable[[float], None] = time.sleep) -> T:
    """call() (one idempotent S3 write or read) until it succeeds, retrying transient failures
    with backoff; when they outlast the policy, one line naming `uri`. Other errors pass at once."""
    waits, tried = backoff(attempts()), 0
    while True:
        try:
            return call()
        except OSError as e:
            if not transient(e):
                raise
            if tried == len(waits):
                raise UserError(f"'{uri}': S3 endpoint unreachable after {tried + 1} attempts over "
                                f"{sum(waits):.0f} s ({first_line(e)})") from None
        sleep(waits[tried])
        tried += 1


def resolve(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path within it) for a local path, file:// or s3:// URI."""
    uri = str(uri)
    if is_s3(uri):
        return s3_filesystem(), uri[len("s3://"):].rstrip("/")
    if uri.startswith("file://"):
        uri = uri[len("file://"):]
    return pafs.LocalFileSystem(), str(Path(uri).expanduser().absolute())


def file_info(uri: str) -> pafs.FileInfo:
    fs, path = resolve(uri)
    try:
        return fs.get_file_info(path)
    except OSError as e:
        raise UserError(f"'{uri}': cannot reach ({first_line(e)})") from None


def exists(uri: str) -> bool:
    return file_info(uri).type != pafs.FileType.NotFound


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else err.__class__.__name__


def read_text_blocks(uri: str, block_size: int = BLOCK) -> Iterator[str]:
    """Stream a UTF-8 text object in blocks; one-line UserError if missing, empty or not text."""
    info = file_info(uri)
    if info.type == pafs.FileType.NotFound:
        raise UserError(f"document '{uri}': no such file or object")
    if info.type == pafs.FileType.Directory:
        raise UserError(f"document '{uri}': is a directory, not a text file")
    fs, path = resolve(uri)
    decoder = codecs.getincrementaldecoder("utf-8")()
    seen = 0
    with fs.open_input_stream(path) as stream:
        while raw := stream.read(block_size):
            seen += len(raw)
            yield decode_block(decoder, raw, uri, final=False)
        yield decode_block(decoder, b"", uri, final=True)
    if seen == 0:
        raise UserError(f"document '{uri}': empty")


def iter_lines(raw_blocks: Iterable[bytes]) -> Iterator[bytes]:
    """The lines (without their newline) of a byte stream given as blocks, streamed."""
    carry = b""
    for raw in raw_blocks:
        lines = (carry + raw).split(b"\n")
        carry = lines.pop()
        yield from lines
    if carry:
        yield carry


def decode_block(decoder: codecs.IncrementalDecoder, raw: bytes, uri: str, final: bool) -> str:
    try:
        text = decoder.decode(raw, final=final)
    except UnicodeDecodeError as e:
        raise UserError(f"document '{uri}': not UTF-8 text (bad byte at offset {e.start})") from None
    if "\x00" in text:
        raise UserError(f"document '{uri}': binary content (NUL bytes), not text")
    return text


def aside(path: str) -> str:
    """The one temp-name rule, for files and folders: `.NAME.<12 hex>.part` beside `path`. Hidden,
    unique to its writer (several processes may write the same path), and taken by no reader's
    pattern (*.parquet, *.jsonl, part-N, config.json)."""
    head, name = os.path.split(str(path).rstrip("/"))
    return os.path.join(head, f".{name}.{uuid.uuid4().hex[:12]}.part")


def into_place(tmp: str | Path, path: str | Path, fs: pafs.FileSystem | None = None) -> None:
    """The one rename: `tmp`, written whole, becomes `path` (a local folder replaces a folder).
    fs: where both are (default: the local disk); on S3 a move is a copy, then a delete."""
    if fs is None or isinstance(fs, pafs.LocalFileSystem):
        if os.path.isdir(path):
            shutil.rmtree(path)
        os.replace(tmp, path)
    else:
        fs.move(str(tmp), str(path))


@contextmanager
def written(fs: pafs.FileSystem, path: str) -> Iterator[str]:
    """The path to write one file to so that it appears at `path` whole or not at all, also to a
    reader or after a kill: local, aside(path), renamed into place after the block (removed if the
    block fails); elsewhere `path` itself (an S3 object appears when its upload completes)."""
    if not isinstance(fs, pafs.LocalFileSystem):
        yield path
        return
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = aside(path)
    try:
        yield tmp
        into_place(tmp, path)
    except Exception as e:
        if full_disk(e):
            raise no_space(path) from None
        raise
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def inside(root: Path, relative: str, what: str) -> Path:
    """root/relative, refused when it would lie outside root (`..`, an absolute part): a remote key
    or a reference must not choose where on this machine a file is written."""
    target = (root / relative.lstrip("/")).resolve()
    if not target.is_relative_to(root.resolve()):
        raise UserError(f"{what} '{relative}': lies outside '{root}'")
    return target


def download_prefix(uri: str, dest: Path) -> Path:
    """Copy every object under an s3:// prefix (or folder) into dest; skips files already there.
    Each file appears whole (written()), also with several processes fetching."""
    fs, root = resolve(uri)
    selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
    infos = [i for i in retried(uri, lambda: fs.get_file_info(selector)) if i.type == pafs.FileType.File]
    if not infos:
        raise UserError(f"'{uri}': no such folder or prefix, or it is empty")
    for info in infos:
        target = inside(dest, info.path[len(root):], f"object of '{uri}'")
        if not (target.exists() and target.stat().st_size == info.size):
            retried(uri, lambda i=info, t=target: _fetch(fs, i.path, t))
    return dest


def _fetch(fs: pafs.FileSystem, path: str, target: Path) -> None:
    with written(pafs.LocalFileSystem(), str(target)) as tmp, fs.open_input_stream(path) as src, \
            open(tmp, "wb") as out:
        while buf := src.read(BLOCK * 8):
            out.write(buf)


def write_whole(uri: str, data: bytes) -> None:
    """Replace one file so that a reader (or a process killed mid-write) never sees half of it
    (written(); a local file is on disk before it is renamed over the old one)."""
    fs, path = resolve(uri)
    if not isinstance(fs, pafs.LocalFileSystem):
        retried(uri, lambda: _upload(fs, data, path))
        return
    with written(fs, path) as target, open(target, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _upload(fs: pafs.FileSystem, data: bytes | Path, path: str) -> None:
    """One object from bytes or a local file (an S3 object appears when its upload completes)."""
    with fs.open_output_stream(path) as out:
        if isinstance(data, bytes):
            out.write(data)
            return
        with open(data, "rb") as f:
            while buf := f.read(BLOCK * 8):
                out.write(buf)


def publish_dir(src: Path, uri: str) -> str:
    """Copy a local folder to `uri` (folder or s3:// prefix) so that it appears whole."""
    with staged_dir(uri) as dest:
        shutil.copytree(src, dest, dirs_exist_ok=True)
    return located(uri)


def located(uri: str) -> str:
    """Where a folder written at `uri` is read from: an s3:// URI as it is, a local one as its path."""
    return uri if is_s3(uri) else resolve(uri)[1]


@contextmanager
def staged_dir(uri: str) -> Iterator[Path]:
    """A local folder to fill that appears whole at `uri` on exit, or not at all on an error.
    Local: written beside the destination and renamed into place (no copy); S3: written to a
    temporary folder, then one PUT per object (each retried), config.json last (readers check for it)."""
    fs, root = resolve(uri)
    local = isinstance(fs, pafs.LocalFileSystem)
    if local:
        tmp = Path(aside(root))
        tmp.mkdir(parents=True)
        try:
            yield tmp
            into_place(tmp, root)
        except Exception as e:
            if full_disk(e):
                raise no_space(root) from None
            raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="memagent-stage-") as d:
        yield Path(d)
        upload_dir(Path(d), uri)


def upload_dir(src: Path, uri: str, last: str = "config.json") -> None:
    """Each file of the local folder `src` to the s3:// prefix `uri`, one PUT each (retried), the
    one named `last` last: a reader that checks for it never takes the folder for whole too early."""
    fs, root = resolve(uri)
    for p in sorted((p for p in src.rglob("*") if p.is_file()), key=lambda p: p.name == last):
        retried(uri, lambda p=p: _upload(fs, p, f"{root}/{p.relative_to(src)}"))


def remove_tree(uri: str) -> None:
    fs, root = resolve(uri)
    try:
        fs.delete_dir(root)
    except (FileNotFoundError, OSError):
        pass


def list_dirs(uri: str) -> list[str]:
    """Names of the folders (or common prefixes) directly under uri; [] if there is none."""
    fs, root = resolve(uri)
    try:  # an endpoint refusing for a while is retried, not read as "no folders"
        infos = retried(uri, lambda: fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)))
    except OSError:
        return []
    return sorted(i.base_name for i in infos if i.type == pafs.FileType.Directory)
