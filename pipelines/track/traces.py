"""The agent's memory traces as MLflow traces: why an answer was given, in MLflow's Traces tab.

One trace per question: its root span holds the question and the answer; under it one span
per turn, in order: a chunk turn (chunk index, prompt tokens read, memory before and after,
the gate's decision, tokens generated, seconds) and the final answer turn. Spans are laid out
on the clock by their recorded seconds, ending now. Every text is redacted first.

MLflow exports traces through its global tracer, to the global tracking URI (asynchronously
unless MLFLOW_ENABLE_ASYNC_TRACE_LOGGING is false, as tracking sets it): `write_traces` points it
at the tracker's URI and flushes before it returns.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pipelines.track.redact import env_secrets, redact

# MLflow's tracer and tracking URI are per process: one writer at a time (Serve's Tracking
# deployment runs its calls on several threads).
_WRITING = threading.Lock()


@dataclass(frozen=True)
class SpanSpec:
    name: str
    seconds: float
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    attributes: dict[str, Any] = field(default_factory=dict)
    kind: str = "LLM"  # an MLflow SpanType


@dataclass(frozen=True)
class TraceSpec:
    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    spans: list[SpanSpec]
    tags: dict[str, str] = field(default_factory=dict)


def turn_spans(memory: list[str], steps: list[dict], prediction: str | None, answer: str,
               scores: dict[str, float] | None = None, gold: list[str] | None = None) -> list[SpanSpec]:
    """The spans of one agent run: memory[i] is the memory after chunk turn i+1; steps: one dict
    per turn (prompt_tokens, generated, seconds, gate, final), empty when not recorded (the
    memory alone then gives the chunk turns)."""
    chunk_steps = [s for s in steps if not s.get("final")] or [{} for _ in memory]
    final = next((s for s in steps if s.get("final")), {})
    spans = []
    for i, step in enumerate(chunk_steps):
        before, after = (memory[i - 1] if 0 < i <= len(memory) else ""), (memory[i] if i < len(memory) else "")
        spans.append(SpanSpec(
            f"chunk {i + 1}", float(step.get("seconds") or 0.0), {"chunk": i + 1, "memory_before": before},
            {"memory_after": after},
            {"chunk_index": i + 1, "tokens_read": step.get("prompt_tokens"), "gate": step.get("gate"),
             "tokens_generated": step.get("generated"), "seconds": step.get("seconds")}))
    outputs = {"prediction": prediction, "answer": answer, **({"gold": gold} if gold is not None else {}),
               **(scores or {})}
    attributes = {"tokens_read": final.get("prompt_tokens"), "tokens_generated": final.get("generated"),
                  "seconds": final.get("seconds"), **(scores or {})}
    spans.append(SpanSpec("final answer", float(final.get("seconds") or 0.0),
                          {"memory": memory[-1] if memory else ""}, outputs, attributes))
    return spans


def clean(value: Any, secrets: list[str]) -> Any:
    """Every string in a JSON-like value redacted."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {k: clean(v, secrets) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [clean(v, secrets) for v in value]
    return value


@contextlib.contextmanager
def global_uri(uri: str) -> Iterator[None]:
    """MLflow's global tracking URI set to `uri` for calls that read it (trace export, a
    registry store resolving models:/<id>), then put back."""
    import mlflow

    before = mlflow.get_tracking_uri() if os.environ.get("MLFLOW_TRACKING_URI") else None
    if before == uri:
        yield
        return
    mlflow.set_tracking_uri(uri)
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)


def write_traces(uri: str, experiment_id: str, run_id: str | None, traces: list[TraceSpec]) -> list[str]:
    """Log the traces (linked to run_id when given), flushed; their ids."""
    import mlflow
    from mlflow import MlflowClient

    secrets, ids = env_secrets(), []
    os.environ.setdefault("MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false")  # written here, no exit-time queue
    with _WRITING, global_uri(uri):
        client = MlflowClient(tracking_uri=uri)
        for spec in traces:
            ids.append(_write(client, experiment_id, run_id, spec, secrets))
        mlflow.flush_trace_async_logging()
    return ids


def _write(client, experiment_id: str, run_id: str | None, spec: TraceSpec, secrets: list[str]) -> str:
    at = time.time_ns() - int(1e9 * sum(s.seconds for s in spec.spans))
    root = client.start_trace(spec.name, span_type="AGENT", inputs=clean(spec.inputs, secrets),
                              tags=clean(spec.tags, secrets), experiment_id=experiment_id, start_time_ns=at,
                              run_id=run_id)
    for s in spec.spans:
        span = client.start_span(s.name, root.trace_id, root.span_id, span_type=s.kind, inputs=clean(s.inputs, secrets),
                                 attributes=clean(s.attributes, secrets), start_time_ns=at)
        at += int(1e9 * s.seconds)
        client.end_span(root.trace_id, span.span_id, outputs=clean(s.outputs, secrets), end_time_ns=at)
    client.end_trace(root.trace_id, outputs=clean(spec.outputs, secrets), end_time_ns=at)
    return root.trace_id
