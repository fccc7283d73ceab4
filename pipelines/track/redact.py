"""Secrets never reach params, log lines or error messages: one pure redaction function.

Covers passwords in URIs (scheme://user:PASSWORD@host), secret-looking query parameters and
key=value pairs (token, secret, password, access key, api key, signature), AWS access key
ids, and any known secret value (e.g. the AWS_SECRET_ACCESS_KEY in the environment).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping

MASK = "***"
_NAME = (r"(?:secret|password|passwd|(?<![a-z])token(?!s|iz|_budget)|access[_-]?key|api[_-]?key|credential|"
         r"signature|(?<![a-z])auth(?!or))")
SECRET_NAME = re.compile(_NAME, re.I)
_URI_PASSWORD = re.compile(r"(?P<head>[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:)(?P<pw>[^\s@/]+)(?=@)")
_KEY_VALUE = re.compile(rf"(?P<key>[\w.-]*{_NAME}[\w.-]*)(?P<sep>['\"]?\s*[=:]\s*)(?P<q>['\"]?)"
                        r"(?P<val>[^\s'\"&,;}]+)", re.I)
_AWS_KEY_ID = re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")
MIN_SECRET_LEN = 4


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every secret it carries replaced by ***."""
    text = str(text)
    for value in sorted({s for s in secrets if s and len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(value, MASK)
    text = _URI_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    text = _KEY_VALUE.sub(lambda m: f"{m.group('key')}{m.group('sep')}{m.group('q')}{MASK}", text)
    return _AWS_KEY_ID.sub(MASK, text)


def env_secrets(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of environment variables whose names look secret (AWS keys, tokens, passwords).

    Key *ids* (AWS_ACCESS_KEY_ID) are identifiers, often short words that also name buckets:
    replacing them everywhere would mangle URIs. Real AWS key ids are caught by their pattern.
    Modes are settings, not secrets: ray.init sets RAY_AUTH_MODE=token, and masking its value
    turned every "token" in an error message into ***."""
    environ = os.environ if environ is None else environ
    return [v for k, v in environ.items()
            if SECRET_NAME.search(k) and not k.upper().endswith(("_ID", "_MODE")) and v]


def redact_params(params: Mapping[str, object], secrets: Iterable[str] = ()) -> dict[str, str]:
    """Flat params ready to log: a secret-named key gets ***, every value is redacted."""
    secrets = list(secrets)
    out = {}
    for key, value in params.items():
        if value is not None and SECRET_NAME.search(key.rsplit(".", 1)[-1]):
            out[key] = MASK
        else:
            out[key] = redact(str(value), secrets)
    return out


def flatten(tree: Mapping, prefix: str = "") -> dict[str, object]:
    """{"a": {"b": 1}} -> {"a.b": 1}: a resolved config as MLflow params."""
    out: dict[str, object] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


class RedactingFilter(logging.Filter):
    """Attach to a handler: every record it emits is redacted (message and exception text)."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = env_secrets()
        record.msg = redact(record.getMessage(), secrets)
        record.args = ()
        if record.exc_info:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info), secrets)
            record.exc_info = None
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> None:
    """Redact every handler of `logger` (root by default); idempotent."""
    logger = logger or logging.getLogger()
    if not logger.handlers:
        logging.basicConfig(level=logging.WARNING)
    for handler in logger.handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
