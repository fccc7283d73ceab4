"""Learning evidence: held-out sub_em of the base model, after the SFT warm start, and after RL
from the SFT checkpoint, on documents as long as the training ones (1x) and 4x longer, with
the no-memory truncation baseline beside the longest.

Every stage resumes: training runs checkpoint (`memagent train --resume`), evaluation cells
are the ladder's resumable cells under benchmarks/results/learning/ (committed as they land),
so the benchmark can be stopped and re-run across sessions.

    .venv/bin/python benchmarks/learning.py                      # niah_single + niah_multikey, n=200
    .venv/bin/python benchmarks/learning.py --stages sft,eval    # some stages only
    .venv/bin/python benchmarks/learning.py --quick              # n=16, short runs: the plumbing

Training documents are 2-4 chunks of 256 tokens (512-1024 tokens); 1x is 1K, 4x is 4K.
The last line is one JSON object: {"table": {model: {task: {length: sub_em}}}, "n": ...}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.common import finish  # noqa: E402

AGENT = ["agent.chunk_size=256", "agent.memory_budget=64", "agent.final_budget=32"]
# The SFT recipe (configs/sft-smollm2.yaml explains each choice).
SFT = ["--config", "configs/sft-smollm2.yaml"]
RL = ["--config", "configs/rl-smollm2.yaml"]
EVAL = ["engine.kind=vllm", "engine.max_model_len=4096", "agent.temperature=0.0", "eval.window=1024",
        "eval.concurrency=32"]


def sh(cmd: list[str]) -> str:
    print("+ " + " ".join(cmd), file=sys.stderr, flush=True)
    out = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    if out.returncode != 0:
        sys.exit(f"learning: stage failed ({out.returncode}): {' '.join(cmd)}")
    return out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""


def train(kind: str, work: Path, extra: list[str], steps: int) -> str:
    """Run (or resume) one training stage; returns its model folder."""
    out = work / kind
    done = out / "done.json"
    if done.exists():
        return json.loads(done.read_text())["model"]
    resume = ["--resume"] if (out / "learner" / "checkpoint_manager_snapshot.json").exists() else []
    flags = ["--sft"] if kind == "sft" else []
    line = sh([sys.executable, "-m", "pipelines.cli", "train", *flags, *resume, "--steps", str(steps),
               "--out", str(out), *extra])
    done.write_text(line)
    return json.loads(line)["model"]


def evaluate(model: str, name: str, results: Path, tasks: str, lengths: str, n: int, methods: str) -> dict:
    """The ladder's cells for one model (resumable); {task: {length: {method: summary}}}."""
    out = results / name / methods
    sh([sys.executable, "-m", "pipelines.cli", "eval", "--model", model, "--tasks", tasks, "--lengths", lengths,
        "--n", str(n), "--methods", methods, "--out", str(out), *AGENT, *EVAL, "track.enabled=false"])
    return json.loads((out / "summary.json").read_text())["table"]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--stages", default="sft,rl,eval")
    p.add_argument("--tasks", default="niah_single,niah_multikey")
    p.add_argument("--n", type=int)
    p.add_argument("--work", default=str(REPO / ".memagent" / "bench" / "learning"))
    p.add_argument("--results", default=str(REPO / "benchmarks" / "results" / "learning"))
    args = p.parse_args()
    n = args.n or (16 if args.quick else 200)
    work, results = Path(args.work), Path(args.results)
    work.mkdir(parents=True, exist_ok=True)
    stages = set(args.stages.split(","))
    sft_steps, rl_steps = (4, 2) if args.quick else (120, 60)
    models = {"base": "smollm2"}
    if "sft" in stages or (work / "sft" / "done.json").exists():
        models["sft"] = train("sft", work, SFT, sft_steps)
    if "rl" in stages or (work / "rl" / "done.json").exists():
        models["rl"] = train("rl", work, [*RL, f"model.path={models['sft']}"], rl_steps)
    table: dict = {}
    if "eval" in stages:
        for name, model in models.items():
            table[name] = evaluate(model, name, results, args.tasks, "1K,4K", n, "memagent")
            table[f"{name}/truncation"] = evaluate(model, name, results, args.tasks, "4K", n, "truncation")
    (results / "summary.json").parent.mkdir(parents=True, exist_ok=True)
    (results / "summary.json").write_text(json.dumps({"table": table, "n": n, "models": models}, indent=1))
    finish({"table": table, "n": n})


if __name__ == "__main__":
    main()
