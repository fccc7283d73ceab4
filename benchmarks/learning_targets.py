"""The learning benchmark's targets (issue #35), judged from its figures: pure functions, so the
verdicts a run prints are the ones its summary keeps. A figure is [mean, lo, hi, n] in points;
None where its cells have not landed yet, and the target is then `pending`."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

Figure = list  # [mean, lo, hi, n] (points; n pairs or rows)


@dataclass(frozen=True)
class Targets:
    """A suite's bars (points of the strict score unless said)."""

    sft_over_base: float  # paired SFT - base at 1x
    agent_over_truncation: float  # paired, the RL model at the longest length
    flat: float  # the RL model's score at the longest length over its score at 1x
    rl_over_sft: float  # paired RL - SFT at 4x with its interval above zero, on most seeds


def spread(diffs: list[Figure]) -> dict:
    """Run-to-run spread of RL's paired gain over seeds: the means' range and standard deviation."""
    means = [d[0] for d in diffs]
    if not means:
        return {}
    return {"seeds": len(means), "min": min(means), "max": max(means), "range": round(max(means) - min(means), 1),
            "sd": round(statistics.stdev(means), 1) if len(means) > 1 else None}


def verdict(figure, met: bool | None) -> dict:
    return {"figure": figure, "verdict": "pending" if met is None else "met" if met else "not met"}


def seeds_met(diffs: list[Figure], bar: float, seeds: int) -> bool | None:
    """Met when a majority of the seeds gain >= bar with the interval above zero; not met once the
    seeds left cannot make a majority; else pending."""
    need = seeds // 2 + 1
    good = sum(d[0] >= bar and d[1] > 0 for d in diffs)
    if good >= need:
        return True
    return False if good + (seeds - len(diffs)) < need else None


def judge(t: Targets, lengths: tuple[str, ...], sft_over_base: Figure | None, agent_over_truncation: Figure | None,
          rl_far: float | None, rl_one: float | None, seed_diffs: list[Figure], seeds: int) -> dict:
    """{target: {"figure", "verdict"}} for one task; lengths are the suite's (1x, 4x, longest)."""
    one, four, far = lengths[0], lengths[1], lengths[-1]
    flat = None if rl_far is None or rl_one is None else [rl_far, rl_one, round(rl_far / rl_one, 2) if rl_one else None]
    return {
        f"SFT over base at {one} >= +{t.sft_over_base:g}":
            verdict(sft_over_base, None if sft_over_base is None else sft_over_base[0] >= t.sft_over_base),
        f"memory agent over truncation at {far} (RL model) >= +{t.agent_over_truncation:g}":
            verdict(agent_over_truncation,
                    None if agent_over_truncation is None else agent_over_truncation[0] >= t.agent_over_truncation),
        f"flat: RL model at {far} >= {t.flat:g} x at {one} ([{far}, {one}, ratio])":
            verdict(flat, None if flat is None else rl_one > 0 and rl_far >= t.flat * rl_one),  # 0 at 1x: nothing held
        f"RL over SFT at {four} >= +{t.rl_over_sft:g}, interval above zero, on {seeds // 2 + 1} of {seeds} seeds":
            verdict(seed_diffs, seeds_met(seed_diffs, t.rl_over_sft, seeds)),
    }


def lines(verdicts: dict) -> list[str]:
    """One printable line per target: `task: target: verdict (figure)`."""
    return [f"{task}: {name}: {v['verdict']} ({v['figure']})" for task, by in verdicts.items() for name, v in by.items()]
