"""The quickstart's closing summary: the held-out strict score before and after each training
stage (the paper's lenient sub_em beside it), which model was kept and why, rates, one held-out
answer with the memories that led to it, and where everything is."""

from __future__ import annotations

from pipelines.config import Config


def pct(r: dict) -> str:
    return (f"{100 * r['strict']:5.1f} %  [{100 * r['lo']:.1f}, {100 * r['hi']:.1f}]  n={r['n']}"
            f"   (sub_em, the paper's lenient: {100 * r['sub_em']:.1f} %)")


def example(before_rows: str, after_rows: str) -> dict | None:
    """A held-out question the kept model answers and the base model missed (else the first)."""
    from pipelines.eval.results import read_cell

    after = read_cell(after_rows)
    missed = {r["sample_id"] for r in read_cell(before_rows) if not r["strict"]}
    return next((r for r in after if r["strict"] and r["sample_id"] in missed), after[0] if after else None)


def summary_lines(cfg: Config, done: dict, out: dict) -> list[str]:
    from pipelines.track.tracker import default_tracking_uri

    rl, reg = done["rl"], done["register"]
    kept = {"sft": "the SFT model", "rl": "the SFT + RL model"}[reg["kept"]]
    lines = ["", "== memagent quickstart ==", "held-out strict score (95% interval):",
             f"  base model      {pct(done['eval_before'])}",
             f"  after SFT       {pct(done['eval_sft'])}",
             f"  after SFT + RL  {pct(done['eval_after'])}",
             f"kept {kept}: RL's {reg['why']}",
             f"rollout: {rl.get('rollout_tokens_per_s', 0):.0f} generated tokens/s; "
             f"learner: {rl.get('train_tokens_per_s', 0):.0f} tokens/s ({rl['steps']} RL steps)"]
    row = example(done["eval_before"]["rows"], done["eval_after" if reg["kept"] == "rl" else "eval_sft"]["rows"])
    if row is not None:
        lines += ["", f"one held-out question: {row['question']}  (gold: {', '.join(row['answers'])})"]
        lines += [f"  memory after chunk {i}: {m}" for i, m in enumerate(row["memory"] or [], 1)]
        lines += [f"  answer: {row['answer']}"]
    root = cfg.home_path.absolute() / "quickstart"
    uri = default_tracking_uri(cfg.home_path, cfg.track)
    lines += ["", f"registered: {out['model']} (@{out['alias']}); batch job results: {done['serve']['output']}",
              f"chunk store: {done['data']['store']}; stage results: {root}",
              f"MLflow: {uri}; open the UI with: .venv/bin/mlflow ui --backend-store-uri {uri}",
              f"ask it yourself (it runs with the agent settings it was trained with): .venv/bin/memagent ask "
              f"--doc YOUR.txt --question \"...\" --show-memory model.path={out['model']}",
              f"{out['minutes']:.1f} min this run"]
    return lines
