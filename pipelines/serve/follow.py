"""Serving `models:/NAME@ALIAS`: each replica pins the alias to the version it names when the
replica loads it (so `/v1/models` says `models:/NAME/VERSION`), and with serve.follow_alias the
gateway polls the alias and reloads the version it moves to through the reload path (weights
swapped on every replica between engine steps; no request dropped)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from pipelines.errors import UserError
from pipelines.models.refs import parse_registry_ref

log = logging.getLogger("memagent.serve")


@dataclass(frozen=True)
class Follow:
    name: str
    alias: str
    tracking_uri: str
    interval_s: float


def alias_of(ref: str) -> tuple[str, str] | None:
    """(name, alias) of a `models:/NAME@ALIAS` reference, else None."""
    if not ref.startswith("models:/"):
        return None
    r = parse_registry_ref(ref)
    return (r.name, r.alias) if r.alias else None


def pin(ref: str, tracking_uri: str) -> str:
    """`models:/NAME@ALIAS` as the `models:/NAME/VERSION` it names now; other refs unchanged."""
    from pipelines.models.registry import version_at

    named = alias_of(ref)
    if named is None:
        return ref
    version = version_at(tracking_uri, *named)
    if version is None:
        raise UserError(f"model '{ref}': the alias names no version (tracking at {tracking_uri})")
    return f"models:/{named[0]}/{version}"


def served_version(ref: str) -> int | None:
    """VERSION of a served `models:/NAME/VERSION`, else None."""
    if not ref.startswith("models:/"):
        return None
    version = parse_registry_ref(ref).version
    return int(version) if version and version.isdigit() else None


async def follow(spec: Follow, served: Callable[[], Awaitable[str]], reload: Callable[[str], Awaitable[bool]]) -> None:
    """Forever: every interval, the alias's version against the one the replicas serve
    (`served()`, a models:/NAME/VERSION); a new one is handed to reload(ref), which says
    whether every replica took it (if not, the next poll tries again)."""
    from pipelines.models.registry import version_at

    while True:
        await asyncio.sleep(spec.interval_s)
        try:
            version = await asyncio.to_thread(version_at, spec.tracking_uri, spec.name, spec.alias)
            if version is not None and version != served_version(await served()):
                if await reload(f"models:/{spec.name}/{version}"):
                    log.info("follow %s@%s: now serving version %d", spec.name, spec.alias, version)
        except Exception as e:  # noqa: BLE001 - a registry or replica outage must not stop the follower
            log.warning("follow %s@%s: %s", spec.name, spec.alias, e)
