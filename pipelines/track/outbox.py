"""Records the tracking server has not taken yet: a bounded queue, oldest first, replayed in
order when the server answers again.

A tracking server that restarts (a deploy, a crashed pod) must cost neither the run its
progress nor the run's page its metrics. The queue is bounded so that a server gone for good
cannot grow a training process's memory: past `limit`, the oldest record leaves the queue for
the local spool (still on disk, not on the server), is counted, and the first such drop is
logged once.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("memagent.track")


@dataclass(frozen=True)
class Held:
    kind: str  # metrics, params, tags, datasets, end_run
    run: str  # the run it belongs to (bound when it was logged, not when it is sent)
    send: Callable[[], Any]
    record: Any  # what the spool keeps if it is never sent


class Outbox:
    def __init__(self, limit: int, spool: Callable[[Held], None]):
        self.limit, self.spool = limit, spool
        self.dropped = 0  # records that left the queue for the spool because it was full
        self._held: deque[Held] = deque()

    def __len__(self) -> int:
        return len(self._held)

    def put(self, item: Held) -> None:
        if len(self._held) >= self.limit:
            oldest = self._held.popleft()
            self.spool(oldest)
            self.dropped += 1
            if self.dropped == 1:
                log.warning("tracking: more than %d records waiting for the server; the oldest go to the "
                            "local spool only from now on (counted: see the end of the run)", self.limit)
        self._held.append(item)

    def flush(self) -> int:
        """Send every held record in order; the first failure raises and keeps it and the rest."""
        sent = 0
        while self._held:
            self._held[0].send()
            self._held.popleft()
            sent += 1
        return sent

    def spill(self) -> int:
        """Every held record to the spool (the server did not come back in time); how many."""
        n = len(self._held)
        while self._held:
            self.spool(self._held.popleft())
        return n
