"""The ladder's outputs: the table in the paper's layout, a CSV, a PNG, readable memory traces.

Table: one block per task, one row per method, one column per length; each cell leads with the
strict score in % with its 95% interval, the lenient ones beside it in parentheses (needles:
the paper's sub_em; QA tasks: f1 and sub_em; pipelines.agent.reward.beside), n/a where a
method cannot run.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from pipelines.agent.reward import SCORE_LABELS, beside
from pipelines.eval.stats import parse_length
from pipelines.track.metrics import EVAL_SCORES, eval_length_metric, eval_metric

Summary = dict[tuple[str, str, str], dict]  # (task, length, method) -> summarize()
LABELS = {"memagent": "MemAgent (memory loop)", "truncation": "no memory (truncated)",
          "full": "full document", "base": "base model (memory loop)"}


def pct(cell: dict, score: str = "strict") -> str:
    if cell["na"]:
        return "n/a"
    return f"{100 * cell[score]:.1f} [{100 * cell[score + '_lo']:.1f}, {100 * cell[score + '_hi']:.1f}]"


def table_cell(cell: dict, task: str) -> str:
    """strict % [interval] (lenient scores beside it, unlabelled: the block's heading names them)."""
    if cell["na"]:
        return "n/a"
    others = ", ".join(f"{100 * cell[s]:.1f}" for s in beside(task))
    return f"{pct(cell)} ({others})"


def format_table(summary: Summary, tasks, lengths, methods) -> str:
    lines = []
    for task in tasks:
        n = max((summary[k]["n"] for k in summary if k[0] == task), default=0)
        others = ", ".join(SCORE_LABELS[s] for s in beside(task))
        lines += [f"### {task}: strict % [95% interval] ({others} %), n={n} per cell", "",
                  "| method | " + " | ".join(lengths) + " |", "|---" * (len(lengths) + 1) + "|"]
        for m in methods:
            cells = [table_cell(summary[(task, ln, m)], task) if (task, ln, m) in summary else "-" for ln in lengths]
            lines.append(f"| {LABELS.get(m, m)} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def table_csv(summary: Summary) -> str:
    buf = io.StringIO()
    cols = ["task", "length", "method", "n", "n_scored", "na", "truncated", "turns", "generated", "ungrounded"] + [
        f"{s}{x}" for s in EVAL_SCORES for x in ("", "_lo", "_hi")]
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for (task, length, method), cell in summary.items():
        w.writerow({"task": task, "length": length, "method": method, **cell})
    return buf.getvalue()


def flat_metrics(summary: Summary) -> dict[str, float]:
    """eval/{task}/{length}/{score} (memory agent) and .../{method}/{score} (baselines)."""
    out = {}
    for (task, length, method), cell in summary.items():
        if cell["na"]:
            continue
        for score in EVAL_SCORES:
            if cell[score] == cell[score]:  # NaN: cells written before this score existed
                out[eval_metric(task, length, score, method)] = cell[score]
    return out


def length_series(summary: Summary) -> dict[int, dict[str, float]]:
    """{length in tokens: {eval/{task}/by_length/...: score}}: each logged at its length as step."""
    out: dict[int, dict[str, float]] = {}
    for (task, length, method), cell in summary.items():
        if cell["na"]:
            continue
        for score in EVAL_SCORES:
            if cell[score] == cell[score]:
                out.setdefault(parse_length(length), {})[eval_length_metric(task, score, method)] = cell[score]
    return out


def plot(summary: Summary, tasks, lengths, methods, path: Path, score: str = "strict") -> Path:
    """The strict score against length: one colour per task, the memory agent solid, baselines dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    styles = {"memagent": ("-", "o"), "truncation": ("--", "s"), "full": ("--", "^"), "base": (":", "x")}
    for i, task in enumerate(tasks):
        for m in methods:
            pts = [(parse_length(ln), 100 * summary[(task, ln, m)][score]) for ln in lengths
                   if (task, ln, m) in summary and not summary[(task, ln, m)]["na"]]
            if pts:
                ls, mk = styles.get(m, ("--", "x"))
                ax.plot(*zip(*pts), linestyle=ls, marker=mk, color=f"C{i}", label=f"{task} / {LABELS.get(m, m)}")
    ax.set_xscale("log", base=2)
    ax.set_xticks([parse_length(ln) for ln in lengths], labels=list(lengths))
    ax.set_xlabel("document length (tokens)")
    ax.set_ylabel(f"{SCORE_LABELS.get(score, score)} (%)")
    ax.set_ylim(-2, 102)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def trace_markdown(rec: dict) -> str:
    """One sample's memory after every chunk, then its answer: what the agent kept, readable."""
    head = [f"# {rec['task']} {rec['length']} {rec['sample_id']} ({rec['method']})", "",
            f"gold: {rec['answers']}", f"prediction: {rec['prediction']}",
            f"scores: strict={rec['strict']:.2f} em={rec['em']:.2f} f1={rec['f1']:.2f} "
            f"sub_em (paper's, lenient)={rec['sub_em']:.2f}", ""]
    head[1:1] = [f"question: {rec.get('question')}"]
    body = [f"## memory after chunk {i}\n\n{m}\n" for i, m in enumerate(rec["memory"], 1)]
    return "\n".join(head + body + ["## answer", "", rec["answer"]])
