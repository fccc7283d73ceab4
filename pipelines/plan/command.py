"""`memagent plan`: before anything runs, what a config's training and batch QA cost on its
cluster: tokens per RL step, engine and learner seconds from a roofline of the accelerator,
steps per hour, accelerator-hours to N steps, documents per hour. Nothing starts; it reads
the config (and a local model's config.json when the model is not one plan knows by name).

    memagent --config cluster-qwen2.5-7b plan --steps 200 --docs 1000000
    memagent --config rl-smollm2 plan --json
    memagent --config cluster-qwen2.5-7b plan --accelerator mi300x --peak-tflops 1307 --mem-bw 5300

Beside every plan, the same model on the workloads measured here (benchmarks/pipeline.py,
benchmarks/batch_data.py, on this CPU) and on the paper's 14B recipe (2,400 s a step on 32
H100s, reported publicly), with the ratio estimate / measured: how far to trust it.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import dataclass

from pipelines.config import Config, load_config
from pipelines.errors import UserError
from pipelines.ingest.builders.common import parse_lengths
from pipelines.plan.cost import QUESTION_TOKENS, Budgets, StepPlan, docs_per_hour, mean_rollout, plan_step
from pipelines.plan.hardware import Accelerator, ModelShape, accelerator, cpu_accelerator, model_shape

RELEASE_TEMPLATE = 116  # pipelines/cluster/window.py's count where no tokenizer is on this machine


def add_arguments(p) -> None:
    p.add_argument("--steps", type=int, default=None, help="RL steps to cost (default: learn.steps)")
    p.add_argument("--docs", type=int, default=1_000_000, help="documents of batch QA to cost (default 1,000,000)")
    p.add_argument("--doc-tokens", default=None, help="batch QA document lengths, e.g. 8K,32K (default: learn.task_lengths)")
    p.add_argument("--accelerator", default=None, help="h100, h200, b200, a100, l40s, l4 or cpu (default: h100 where "
                   "the cluster has GPUs, else this CPU)")
    p.add_argument("--peak-tflops", type=float, default=None, help="the accelerator's dense bf16 TFLOP/s")
    p.add_argument("--mem-bw", type=float, default=None, help="the accelerator's memory bandwidth, GB/s")
    p.add_argument("--json", action="store_true", help="print the plan as one JSON object")


@dataclass(frozen=True)
class Layout:
    """Where the work runs, in accelerator units (GPUs, or cores on a CPU)."""

    engines: int
    units_per_engine: int
    learner_units: int
    serve_engines: int
    serve_units: int


def layout(cfg: Config, acc: Accelerator) -> Layout:
    """On a CPU an engine's threads run on engine.cpu_cores (else every core of its node) and the
    learner's on learn.cpus_per_worker cores a worker; on GPUs, tensor_parallel_size and one each."""
    if acc.unit == "core":
        cores = engine_cores(cfg.engine.cpu_cores, cfg.cluster.cpus_per_node or os.cpu_count() or 1)
        return Layout(cfg.rollout.workers, cores, cfg.learn.num_workers * max(1, math.floor(cfg.learn.cpus_per_worker)),
                      cfg.serve.replicas, cores)
    tp = cfg.engine.tensor_parallel_size
    return Layout(cfg.rollout.workers, tp, cfg.learn.num_workers, cfg.serve.replicas, tp)


def engine_cores(spec: str | None, node_cores: float) -> int:
    """'0-3,6' -> 5 cores; None -> the node's."""
    if spec is None:
        return max(1, math.floor(node_cores))
    total = 0
    for part in spec.split(","):
        first, _, last = part.partition("-")
        total += int(last or first) - int(first) + 1
    return total


def budgets(cfg: Config, template: int) -> Budgets:
    a = cfg.agent
    return Budgets(template, min(QUESTION_TOKENS, a.question_budget), a.chunk_size, a.memory_budget, a.final_budget)


def template_tokens(cfg: Config) -> int:
    """As `config check` counts it: with the model's tokenizer where it is on this machine."""
    from pipelines.cluster.window import window_budget

    try:
        return window_budget(cfg).parts["template"]
    except UserError:
        return RELEASE_TEMPLATE


def rl_step(cfg: Config, m: ModelShape, acc: Accelerator, template: int) -> StepPlan:
    r, lay = cfg.rollout, layout(cfg, acc)
    rollouts = r.batch_groups * r.group_size
    trained = max(0, m.layers - cfg.learn.freeze_layers)
    concurrency = min(cfg.engine.max_num_seqs, r.loops_per_worker, math.ceil(rollouts / lay.engines))
    return plan_step(mean_rollout(parse_lengths(str(cfg.learn.task_lengths)), budgets(cfg, template)), rollouts, m, acc,
                     engines=lay.engines, units_per_engine=lay.units_per_engine, learner_units=lay.learner_units,
                     concurrency=concurrency, trained_layers=trained, checkpoint=cfg.learn.grad_checkpoint,
                     reference=cfg.learn.kl_coef > 0, overlapped=r.max_staleness != 0)


def batch_rate(cfg: Config, m: ModelShape, acc: Accelerator, template: int, lengths: list[int]) -> float:
    lay = layout(cfg, acc)
    concurrency = min(cfg.engine.max_num_seqs, cfg.serve.max_ongoing_requests)
    return docs_per_hour(mean_rollout(lengths, budgets(cfg, template)), m, acc, engines=lay.serve_engines,
                         units_per_engine=lay.serve_units, concurrency=concurrency)


def default_accelerator(cfg: Config) -> str:
    return "h100" if cfg.cluster.gpus_per_node > 0 or cfg.engine.use_gpu else "cpu"


def check_counts(args) -> None:
    for flag, value in (("--steps", args.steps), ("--docs", args.docs), ("--peak-tflops", args.peak_tflops),
                        ("--mem-bw", args.mem_bw)):
        if value is not None and (value < 0 or (value == 0 and flag in ("--peak-tflops", "--mem-bw"))):
            raise UserError(f"{flag} {value}: must be {'positive' if flag.startswith(('--peak', '--mem')) else '0 or more'}")


def plan(cfg: Config, args) -> dict:
    check_counts(args)
    acc = accelerator(args.accelerator or default_accelerator(cfg), args.peak_tflops, args.mem_bw)
    m = model_shape(cfg.model.path, cfg.home_path)
    template = template_tokens(cfg)
    step = rl_step(cfg, m, acc, template)
    steps = args.steps if args.steps is not None else cfg.learn.steps
    lengths = parse_lengths(args.doc_tokens or str(cfg.learn.task_lengths))
    rate = batch_rate(cfg, m, acc, template, lengths)
    lay = layout(cfg, acc)
    return {
        "accelerator": {"name": acc.name, "unit": acc.unit, "peak_tflops": acc.peak_flops / 1e12,
                        "mem_bw_gbs": acc.mem_bw / 1e9, "mfu": acc.mfu, "bw_util": acc.bw_util, "line": acc.line()},
        "model": {"name": m.name, "params": m.params},
        "rl_step": {"rollouts": step.rollouts, "turns": step.tokens.turns, "prefill_tokens": step.tokens.prefill,
                    "decode_tokens": step.tokens.decode, "generated_tokens": step.tokens.total,
                    "trained_tokens": step.tokens.total, "engine_s": step.engine_s, "learner_s": step.learner_s,
                    "step_s": step.step_s, "overlapped": cfg.rollout.max_staleness != 0,
                    "decode_bound": step.decode_bound, "steps_per_hour": step.steps_per_hour,
                    "engines": lay.engines, "units_per_engine": lay.units_per_engine,
                    "learner_units": lay.learner_units, "units": step.units},
        "steps": steps, "hours": steps * step.step_s / 3600, "accelerator_hours": step.accelerator_hours(steps),
        "batch": {"doc_tokens": lengths, "docs_per_hour": rate, "docs": args.docs, "hours": args.docs / rate,
                  "engines": lay.serve_engines, "units_per_engine": lay.serve_units,
                  "accelerator_hours": args.docs / rate * lay.serve_engines * lay.serve_units},
        "measured": comparisons(),
    }


def run(cfg: Config, args) -> None:
    out = plan(cfg, args)
    print(json.dumps(out) if args.json else "\n".join(lines(out, args.config)))


def lines(p: dict, source: str | None) -> list[str]:
    s, b, a, u = p["rl_step"], p["batch"], p["accelerator"], p["accelerator"]["unit"]
    mode = "overlapped (rollout.max_staleness >= 1)" if s["overlapped"] else "in turn (rollout.max_staleness 0)"
    return [
        f"plan: {source or 'the local preset'}, {p['model']['name']} ({p['model']['params'] / 1e9:.3g}B parameters)",
        f"  {a['line']}",
        f"RL step: {s['rollouts']} rollouts, {s['turns'] / s['rollouts']:.1f} turns each",
        f"  tokens: {s['prefill_tokens']:,.0f} prefill + {s['decode_tokens']:,.0f} decode generated;"
        f" {s['trained_tokens']:,.0f} trained",
        f"  engines {s['engine_s']:,.1f} s ({s['engines']} x {s['units_per_engine']} {u}; decode {s['decode_bound']}-bound),"
        f" learner {s['learner_s']:,.1f} s ({s['learner_units']} {u}), step {s['step_s']:,.1f} s {mode}",
        f"  {s['steps_per_hour']:,.1f} steps/hour; {p['steps']} steps: {p['hours']:,.1f} h,"
        f" {p['accelerator_hours']:,.0f} {u}-hours ({s['units']} {u})",
        f"batch QA: {b['docs_per_hour']:,.0f} documents/hour ({b['engines']} x {b['units_per_engine']} {u},"
        f" documents of {','.join(map(str, b['doc_tokens']))} tokens); {b['docs']:,} documents: {b['hours']:,.1f} h,"
        f" {b['accelerator_hours']:,.0f} {u}-hours",
        "the same model against measured figures (estimate / measured):",
        *[f"  {c['what']}: {c['estimate']:,.1f} vs {c['measured']:,.1f} {c['unit']} ({c['ratio']:.2f}x)"
          for c in p["measured"]],
    ]


# Measured here (README: benchmarks/pipeline.py run 6 of 2026-12-04 and batch_data.py --quick,
# idle machine, one core per engine and one for the learner) and reported for the paper's 14B
# recipe on 32 H100s (verl: the 32 GPUs generate, then all train; ~2,100 s of a step the actor update).
PIPELINE = ["learn.task_n=64", "agent.memory_budget=128", "learn.freeze_layers=28", "learn.token_budget=4096",
            "rollout.workers=1", "rollout.worker_num_cpus=1", "learn.cpus_per_worker=1", "learn.num_workers=1"]
BATCH = ["engine.cpu_cores=0-1", "agent.chunk_size=256", "agent.memory_budget=32", "agent.final_budget=16", "serve.replicas=1",
         "serve.replica_cpus=1", "engine.max_num_seqs=64", "serve.max_ongoing_requests=32"]
BATCH_DOCS = [200, 450, 700]  # 200-700-token documents, uniform
PAPER_14B = ["model.path=s3://models/Qwen2.5-14B-Instruct"]
# The CPU those runs measured on (an AMD EPYC, Zen 5: AVX-512 on 512-bit pipes, with bf16): the
# estimates are for it, whatever machine prints the comparison (one with AVX2 only has a quarter of
# its peak, and its estimate would be compared with another machine's figures).
MEASURED_CPU = "vendor_id\t: AuthenticAMD\ncpu MHz\t\t: 2445.4\nflags\t\t: fma avx2 avx512f avx512_bf16 avx512_vp2intersect\n"


@functools.cache  # fixed workloads: the same figures for every plan
def comparisons() -> list[dict]:
    cpu = cpu_accelerator(MEASURED_CPU)
    bench = load_config("rl-smollm2", PIPELINE)
    m = model_shape(bench.model.path)
    step = rl_step(bench, m, cpu, template_tokens(bench))
    batch = load_config("local", BATCH)
    rate = batch_rate(batch, m, cpu, template_tokens(batch), BATCH_DOCS)
    paper = load_config("cluster-qwen2.5-7b", PAPER_14B)
    h100 = accelerator("h100")
    p = rl_step(paper, model_shape(paper.model.path), h100, RELEASE_TEMPLATE)
    gpus, lay = paper.cluster.nodes * paper.cluster.gpus_per_node, layout(paper, h100)
    engine_gpu_s = p.engine_s * lay.engines * lay.units_per_engine
    learner_gpu_s = p.learner_s * lay.learner_units
    colocated = (engine_gpu_s + learner_gpu_s) / gpus
    return [
        ratio("benchmarks/pipeline.py generation a step (G)", step.engine_s, 62.38, "s"),
        ratio("benchmarks/pipeline.py training a step (T)", step.learner_s, 74.04, "s"),
        ratio("benchmarks/pipeline.py overlapped step", step.step_s, 84.4, "s"),
        ratio("benchmarks/batch_data.py --quick", rate, 6844, "documents/hour"),
        ratio(f"paper's 14B recipe on {gpus} H100s, a step", colocated, 2400, "s"),
        ratio(f"paper's 14B recipe on {gpus} H100s, its actor update", learner_gpu_s / gpus, 2100, "s"),
    ]


def ratio(what: str, estimate: float, measured: float, unit: str) -> dict:
    return {"what": what, "estimate": estimate, "measured": measured, "unit": unit, "ratio": estimate / measured}
