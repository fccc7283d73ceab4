"""The cost model behind `memagent plan`: tokens from the agent's budgets, seconds from a
roofline. Pure functions of numbers; pipelines/plan/command.py reads them off a config.

Tokens. A rollout reads a document of D tokens in ceil(D / chunk) memory turns and one final
turn. A memory turn's prompt is template + question + memory + chunk (the first turn's memory
empty) and it writes a memory; the final turn's prompt holds no chunk and writes the answer.
Outputs fill MEMORY_FILL of their budgets (benchmarks/pipeline.py: 98 of 128 memory tokens).
The engine computes the template's tokens once (it opens every prompt: vLLM's prefix cache
keeps it); no other credit, for a group's shared first turn, dropped groups or gates that exit
early, so the figures lean high. The learner trains every turn's whole sequence
(Multi-Conv: each turn is its own conversation), so trained tokens = prefill + decode.

Seconds. Prefill and training are compute-bound: FLOPs / (peak x MFU). Per token, a forward
pass is 2 x params plus attention (2 x layers x hidden x context); a backward pass is 2x the
forward of what it goes through: the head (its input gradient) and the trained layers, which
checkpointing runs forward once more; a KL reference adds a forward. Decode is the slower of
compute and memory: every decode step streams the weights once for the whole batch in flight
plus each sequence's KV cache, at bw x utilisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipelines.plan.hardware import Accelerator, ModelShape

MEMORY_FILL = 0.75
QUESTION_TOKENS = 48  # a typical question; agent.question_budget is only its cap


@dataclass(frozen=True)
class Budgets:
    template: int
    question: int
    chunk: int
    memory: int
    final: int


@dataclass(frozen=True)
class Tokens:
    """Summed over some turns: prompt tokens, output tokens, and the output tokens weighted by
    the context they are decoded against (for the KV reads)."""

    prefill: float = 0.0
    decode: float = 0.0
    decode_context: float = 0.0
    turns: float = 0.0
    cached: float = 0.0  # prefill tokens the engine's prefix cache holds (the template's)

    def __add__(self, o: Tokens) -> Tokens:
        return Tokens(self.prefill + o.prefill, self.decode + o.decode, self.decode_context + o.decode_context,
                      self.turns + o.turns, self.cached + o.cached)

    def __mul__(self, k: float) -> Tokens:
        return Tokens(self.prefill * k, self.decode * k, self.decode_context * k, self.turns * k, self.cached * k)

    @property
    def total(self) -> float:
        return self.prefill + self.decode


def turn(prompt: float, output: float, cached: float) -> Tokens:
    return Tokens(prompt, output, output * (prompt + output / 2), 1, cached)


def rollout_tokens(doc_tokens: int, b: Budgets, fill: float = MEMORY_FILL) -> Tokens:
    """One question over one document: its memory turns, then the final turn."""
    memory = fill * b.memory
    out = Tokens()
    chunks = max(1, math.ceil(doc_tokens / b.chunk))
    for i in range(chunks):
        chunk = min(b.chunk, doc_tokens - i * b.chunk) if doc_tokens > 0 else 0
        out = out + turn(b.template + b.question + (memory if i else 0) + chunk, memory, b.template)
    return out + turn(b.template + b.question + memory, fill * b.final, b.template)


def mean_rollout(doc_lengths: list[int], b: Budgets) -> Tokens:
    """The mean over a document-length mix, each length equally likely (as learn.task_lengths)."""
    total = Tokens()
    for n in doc_lengths:
        total = total + rollout_tokens(n, b)
    return total * (1 / len(doc_lengths))


def forward_flops(m: ModelShape, context: float) -> float:
    return 2 * m.params + 2 * m.layers * m.hidden * context


def train_flops_per_token(m: ModelShape, context: float, trained_layers: int, *, checkpoint: bool,
                          reference: bool) -> float:
    """Forward, backward through the head and the trained layers (recomputed when checkpointed),
    and a reference forward when a KL term needs one."""
    fwd = forward_flops(m, context)
    layer = 2 * m.layer_params + 2 * m.hidden * context
    bwd = 2 * (2 * m.embedding_params + trained_layers * layer)
    return fwd + bwd + (trained_layers * layer if checkpoint else 0) + (fwd if reference else 0)


def engine_seconds(t: Tokens, m: ModelShape, acc: Accelerator, concurrency: int) -> dict[str, float]:
    """Accelerator-seconds (one unit) to generate `t`: prefill compute-bound; decode the slower of
    compute and streaming the weights (shared by `concurrency` sequences) and the KV cache."""
    prefill_ctx = t.prefill / max(t.turns, 1) / 2
    prefill = (t.prefill - t.cached) * forward_flops(m, prefill_ctx) / (acc.peak_flops * acc.mfu)
    compute = t.decode * 2 * m.params / (acc.peak_flops * acc.mfu)
    weights = 2 * m.params  # bf16
    memory = (t.decode * weights / max(concurrency, 1) + t.decode_context * m.kv_bytes_per_token()) / (
        acc.mem_bw * acc.bw_util)
    return {"prefill_s": prefill, "decode_s": max(compute, memory), "decode_bound": "memory" if memory > compute else "compute"}


def learner_seconds(t: Tokens, m: ModelShape, acc: Accelerator, trained_layers: int, *, checkpoint: bool,
                    reference: bool) -> float:
    """Accelerator-seconds (one unit) to train on every token of `t` once."""
    context = t.prefill / max(t.turns, 1) / 2
    flops = train_flops_per_token(m, context, trained_layers, checkpoint=checkpoint, reference=reference)
    return t.total * flops / (acc.peak_flops * acc.mfu)


@dataclass(frozen=True)
class StepPlan:
    rollouts: int
    tokens: Tokens
    engine_s: float  # wall seconds of the step's generation on the rollout engines
    learner_s: float  # wall seconds of its training on the learner's units
    step_s: float
    units: int  # accelerators (or cores) the step holds
    decode_bound: str

    @property
    def steps_per_hour(self) -> float:
        return 3600 / self.step_s

    def accelerator_hours(self, steps: int) -> float:
        return steps * self.step_s * self.units / 3600


def plan_step(rollout: Tokens, rollouts: int, m: ModelShape, acc: Accelerator, *, engines: int, units_per_engine: int,
              learner_units: int, concurrency: int, trained_layers: int, checkpoint: bool, reference: bool,
              overlapped: bool) -> StepPlan:
    """One RL step: `rollouts` rollouts on `engines` engines, then (or, overlapped, meanwhile)
    training on `learner_units`; an engine spread over several units (tensor parallel) is
    taken to split its work evenly."""
    tokens = rollout * rollouts
    gen = engine_seconds(tokens, m, acc, concurrency)
    engine_s = (gen["prefill_s"] + gen["decode_s"]) / (engines * units_per_engine)
    learner_s = learner_seconds(tokens, m, acc, trained_layers, checkpoint=checkpoint, reference=reference) / learner_units
    step_s = max(engine_s, learner_s) if overlapped else engine_s + learner_s
    return StepPlan(rollouts, tokens, engine_s, learner_s, step_s, engines * units_per_engine + learner_units,
                    gen["decode_bound"])


def docs_per_hour(rollout: Tokens, m: ModelShape, acc: Accelerator, *, engines: int, units_per_engine: int,
                  concurrency: int) -> float:
    """Batch QA: one rollout per document on every engine, nothing trained."""
    gen = engine_seconds(rollout, m, acc, concurrency)
    return 3600 * engines * units_per_engine / (gen["prefill_s"] + gen["decode_s"])
