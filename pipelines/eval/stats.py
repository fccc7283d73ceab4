"""Pure helpers of the ladder: length labels, the mean with a 95% interval, paired differences."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from pipelines.errors import UserError

Z95 = 1.959964
_LENGTH = re.compile(r"^(\d+(?:\.\d+)?)([KkMm]?)$")


def parse_length(label: str) -> int:
    """'8K' -> 8192 tokens, '1M' -> 1048576, '3000' -> 3000 (K = 1024, as in RULER)."""
    m = _LENGTH.match(str(label).strip())
    if not m:
        raise UserError(f"length '{label}': expected a token count like 4096, 8K or 1M")
    scale = {"": 1, "k": 1024, "m": 1024 * 1024}[m.group(2).lower()]
    tokens = int(float(m.group(1)) * scale)
    if tokens <= 0:
        raise UserError(f"length '{label}': must be positive")
    return tokens


def mean_ci(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high), 95%. Wilson's interval for 0/1 scores (sane at 0% and 100%),
    the normal approximation for fractional scores such as F1."""
    n = len(values)
    if n == 0:
        return (math.nan, math.nan, math.nan)
    mean = sum(values) / n
    if all(v in (0.0, 1.0) for v in values):
        z2 = Z95 * Z95
        centre = (mean + z2 / (2 * n)) / (1 + z2 / n)
        half = Z95 * math.sqrt(mean * (1 - mean) / n + z2 / (4 * n * n)) / (1 + z2 / n)
        return (mean, max(0.0, centre - half), min(1.0, centre + half))
    var = sum((v - mean) ** 2 for v in values) / (n - 1) if n > 1 else 0.0
    half = Z95 * math.sqrt(var / n)
    return (mean, max(0.0, mean - half), min(1.0, mean + half))


def paired_diff(before: dict[str, float], after: dict[str, float]) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of after - before over the samples both scored, 95% (normal
    approximation on the per-sample differences): the interval of an improvement measured on
    the same questions, much tighter than two independent intervals when the scores correlate."""
    keys = sorted(before.keys() & after.keys())
    n = len(keys)
    if n == 0:
        return (math.nan, math.nan, math.nan, 0)
    diffs = [after[k] - before[k] for k in keys]
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    half = Z95 * math.sqrt(var / n)
    return (mean, mean - half, mean + half, n)
