"""Progress of a long job: a bar on a terminal, periodic one-line status records elsewhere.

    from pipelines.progress import Progress

    with Progress("ingest", total=len(objects), unit="object") as bar:
        for result in results:
            bar.update(1, chunks=summary.chunks)   # extra fields follow the counts and rates
        bar.set(done, total)                       # or absolute values, when polling a job
        bar.write("a line of the command's output")  # to stdout, without tearing the bar

On a terminal it is a tqdm bar (count, rate, time left). Otherwise (a pipe, a file, a job
log) it prints a line such as
    ingest: 12/40 objects (30%), 2.1 objects/s, 13s left, chunks=120
every EVERY_S seconds, whenever another tenth of the total is done, and once at the end.
Both go to logs.console(): stderr, never stdout, so stdout and `--json`'s last line stay clean.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from pipelines import logs

EVERY_S = 10.0
STEP = 0.1  # a status line whenever another tenth of the total is done


def _num(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


class Progress:
    def __init__(self, desc: str, total: int | None = None, unit: str = "item", every_s: float = EVERY_S,
                 stream: TextIO | None = None):
        self.desc, self.total, self.unit, self.every_s = desc, total, unit, every_s
        self.stream = stream or logs.console()
        self.n, self.fields = 0, {}
        self.start = self._last_t = time.monotonic()
        self._last_frac = 0.0
        self._bar = None
        if self.stream.isatty():
            from tqdm import tqdm

            self._bar = tqdm(total=total, desc=desc, unit=unit, file=self.stream, dynamic_ncols=True,
                             mininterval=0.5, disable=False)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def update(self, n: int = 1, **fields) -> None:
        """n more done; fields (e.g. errors=2, tok_s=812.5) replace the shown ones of the same name."""
        self.set(self.n + n, **fields)

    def set(self, n: int | None = None, total: int | None = None, **fields) -> None:
        """Absolute values (a polled job's counts)."""
        if self.stream is None:  # closed
            return
        self.n = self.n if n is None else n
        self.total = self.total if total is None else total
        self.fields.update(fields)
        if self._bar is not None:
            self._bar.total, self._bar.n = self.total, self.n
            if self.fields:
                self._bar.set_postfix({k: _num(v) for k, v in self.fields.items()}, refresh=False)
            self._bar.refresh()
        elif self._due():
            self._emit()

    def write(self, text: str, file: TextIO | None = None) -> None:
        """Print a line of output (stdout by default) without tearing the bar."""
        if self._bar is not None:
            self._bar.clear()
        print(text, file=file or sys.stdout, flush=True)
        if self._bar is not None:
            self._bar.refresh()

    def line(self, done: bool = False) -> str:
        """The status record: counts, share, rate, time left (or taken) and the fields."""
        rate = self.n / self.elapsed if self.elapsed > 0 else 0.0
        parts = [f"{self.n}/{self.total} {self.unit}s" if self.total else f"{self.n} {self.unit}s"]
        if self.total:
            parts[0] += f" ({100 * self.n / self.total:.0f}%)"
        parts.append(f"{rate:.3g} {self.unit}s/s")
        if done:
            parts.append(f"done in {_interval(self.elapsed)}")
        elif self.total and rate > 0:
            parts.append(f"{_interval(max(self.total - self.n, 0) / rate)} left")
        parts += [f"{k}={_num(v)}" for k, v in self.fields.items()]
        return f"{self.desc}: " + ", ".join(parts)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.stream is not None:
            print(self.line(done=True), file=self.stream, flush=True)
        self.stream = None

    def _due(self) -> bool:
        now = time.monotonic()
        frac = self.n / self.total if self.total else 0.0
        return now - self._last_t >= self.every_s or frac - self._last_frac >= STEP - 1e-9

    def _emit(self) -> None:
        self._last_t = time.monotonic()
        self._last_frac = self.n / self.total if self.total else 0.0
        print(self.line(), file=self.stream, flush=True)


def _interval(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s}s" if s < 60 else f"{s // 60}m{s % 60:02d}s" if s < 3600 else f"{s // 3600}h{s % 3600 // 60:02d}m"
