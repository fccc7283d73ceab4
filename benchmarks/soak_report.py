"""The soak's tables and verdicts (benchmarks/soak.py), pure: what each request ended as, per-minute
counts and latencies, RSS growth per process, the targets met or not, the markdown table."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.common import MB

RSS_TARGET = 0.05  # peak RSS growth of any one server process over the judged minutes


@dataclass(frozen=True)
class Outcome:
    """One request: when it was sent (s since the phase began), how it ended."""

    sent: float
    status: int  # HTTP status; 0: no answer (connection error, timeout)
    latency: float
    retry_after: str | None
    answered: bool  # a 200 that carries an answer
    error: str | None = None
    unavailable: bool = False  # a 503 for a replica that died (the gateway's "replica unavailable")


def pct(values: list[float], q: float) -> float | None:
    values = sorted(values)
    return round(values[min(len(values) - 1, int(q * len(values)))], 3) if values else None


def per_minute(outcomes: list[Outcome], minutes: int) -> list[dict]:
    """The table's rows, by the minute a request was sent in."""
    rows = []
    for m in range(minutes):
        sent = [o for o in outcomes if m * 60 <= o.sent < (m + 1) * 60]
        ok = [o.latency for o in sent if o.status == 200]
        refused = [o for o in sent if o.status == 503]
        rows.append({"minute": m + 1, "sent": len(sent), "accepted": len(ok), "refused": len(refused),
                     "refused_without_retry_after": sum(o.retry_after is None for o in refused),
                     "refused_replica_unavailable": sum(o.unavailable for o in refused),
                     "other_errors": sum(o.status not in (200, 503) for o in sent),
                     "p50_s": pct(ok, 0.5), "p99_s": pct(ok, 0.99)})
    return rows


def rss_growth(samples: list[dict], born: dict[str, float], from_minute: float) -> dict[str, dict]:
    """Per process: its peak RSS from `from_minute` on against its sample there (a process born
    after from_minute - 1: against its first sample a minute after birth, past its start-up)."""
    growth = {}
    for key, birth in born.items():
        start = max(from_minute, birth + 1)
        series = [s["rss"][key] for s in samples if s["minute"] >= start - 0.05 and key in s["rss"]]
        if len(series) < 2:
            continue
        growth[key] = {"from_mb": round(series[0] / MB), "peak_mb": round(max(series) / MB),
                       "growth": round(max(series) / series[0] - 1, 4), "samples": len(series)}
    return growth


def judge(table: list[dict], unanswered: int, unanswered_200: int, growth: dict, batch: dict) -> dict:
    """The targets, each met or not."""
    worst = max((g["growth"] for g in growth.values()), default=None)
    return {
        "errors_only_503_with_retry_after": all(r["other_errors"] == 0 and r["refused_without_retry_after"] == 0
                                                for r in table),
        "every_accepted_answered": unanswered == 0 and unanswered_200 == 0,
        "rss_growth_within_5pct": worst is not None and worst <= RSS_TARGET,
        "batch_rows_once": batch["once"],
    }


def markdown(res: dict) -> str:
    steps = ", ".join(f"{s['clients']}: {s['rate']}" for s in res["ramp"])
    lines = [f"# Soak {res['date']}", "", res["note"], "", f"`{res['command']}`", "",
             *([f"**Stopped early:** {res['stopped']}", ""] if res["stopped"] else []),
             f"capacity {res['capacity_rps']} req/s (ramp, callers: req/s answered: {steps}); "
             f"load {res['load']}x = {res['rate_rps']} req/s for {res['minutes']} min; "
             f"replica pid {res['kill'].get('pid')} killed at {res['kill'].get('at_s')} s, "
             f"replaced after {res['kill'].get('replaced_after_s')} s", "",
             "| minute | sent | accepted (200) | refused (503) | of which replica unavailable | 503 without Retry-After "
             "| other errors | p50 s | p99 s |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['minute']} | {r['sent']} | {r['accepted']} | {r['refused']} | {r['refused_replica_unavailable']} | "
              f"{r['refused_without_retry_after']} | "
              f"{r['other_errors']} | {r['p50_s']} | {r['p99_s']} |" for r in res["per_minute"]]
    lines += ["", f"RSS from minute {res['rss_from_minute']}: peak against the first sample", "",
              "| process | from MB | peak MB | growth |", "|---|---|---|---|"]
    lines += [f"| {k} | {g['from_mb']} | {g['peak_mb']} | {g['growth'] * 100:+.1f}% |" for k, g in res["rss_growth"].items()]
    lines += ["", f"batch job: {res['batch']}", "", "| target | met |", "|---|---|"]
    lines += [f"| {k} | {'met' if v else 'not met'} |" for k, v in res["targets"].items()]
    return "\n".join(lines) + "\n"
