"""HTTP request bodies, the one-line error every bad input gets, the Reply every call
behind the gateway answers with, a document's Answered (/v1/answer's body), and the OutputRow
every batch row is answered with (the replica makes it, the batch I/O in jobs.py stores it).

Bodies are parsed by hand (size check, JSON, then these models) so that each failure,
including malformed JSON, answers with a 4xx and one line naming the input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from pipelines.errors import UserError

DOC_FIELDS = ("document", "doc_id", "uri")
MAX_CHOICES = 16  # n: completions per chat request
MAX_STOPS = 4  # OpenAI's limit on stop sequences


def log_internal(e: BaseException) -> str:
    """A new request id, with the traceback logged under it: a 500 answer names the id, never the
    exception's text (it may hold server paths)."""
    import logging
    import uuid

    rid = uuid.uuid4().hex[:12]
    logging.getLogger("memagent.serve").error("request %s: internal error", rid, exc_info=e)
    return rid


class ServeError(UserError):
    """Bad input with its HTTP status."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Reply:
    """What a replica or the job manager answers the gateway: a JSON body with its status, or a
    one-line error with its status. Replicas never raise for bad input; they return a Reply
    (it crosses process boundaries, and the gateway need not guess what a dict means)."""

    body: Any = None
    status: int = 200
    error: str | None = None
    kind: str | None = None  # a domain error's kind (documents.DocumentError): the gateway picks its status

    @classmethod
    def failure(cls, e: BaseException) -> Reply:
        if isinstance(e, ServeError):
            return cls(status=e.status, error=str(e))
        if isinstance(e, UserError):
            return cls(status=400, error=str(e), kind=getattr(e, "kind", None))
        return cls(status=500, error=f"internal error (request id {log_internal(e)})")


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AnswerRequest(Body):
    question: str = Field(min_length=1)
    document: str | None = None
    doc_id: str | None = None
    uri: str | None = None
    show_memory: bool = False
    stream: bool = False  # server-sent events: one per memory turn as it ends, then the answer

    @model_validator(mode="after")
    def one_document(self):
        given = [f for f in DOC_FIELDS if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(f"give exactly one of document, doc_id, uri (got {len(given)})")
        if not self.question.strip():
            raise ValueError("question: empty")
        return self


class JobRequest(Body):
    input: str = Field(min_length=1)
    output: str = Field(min_length=1)


class ReloadRequest(Body):
    model: str = Field(min_length=1)
    version: int | None = Field(None, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    role: str
    content: str


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    include_usage: bool = False


class ChatRequest(BaseModel):
    """The OpenAI chat body; fields a client may send but that change nothing here are allowed."""

    model_config = ConfigDict(extra="allow", frozen=True)
    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = None
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    stop: str | list[str] | None = None

    @model_validator(mode="after")
    def supported(self):
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options: only allowed with stream: true")
        if len(self.stops) > MAX_STOPS:
            raise ValueError(f"stop: at most {MAX_STOPS} sequences (got {len(self.stops)})")
        if "" in self.stops:
            raise ValueError("stop: an empty string is no stop sequence")
        return self

    @property
    def stops(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())


def validation_reason(err: ValidationError) -> str:
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    msg = "missing" if first["type"] == "missing" else first["msg"].removeprefix("Value error, ")
    return f"{loc}: {msg}" if loc else msg


def parse_body(raw: bytes, model: type[BaseModel], limit: int) -> Any:
    """bytes -> validated model, or ServeError (413 too large, 400 malformed, 422 invalid)."""
    if len(raw) > limit:
        raise ServeError(f"request body: {len(raw)} bytes > limit of {limit}", 413)
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ServeError(f"request body: malformed JSON ({e.__class__.__name__} at position "
                         f"{getattr(e, 'pos', getattr(e, 'start', 0))})", 400) from None
    if not isinstance(data, dict):
        raise ServeError("request body: expected a JSON object", 400)
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ServeError(validation_reason(e), 422) from None


# What the gates did with a document (pipelines.agent.gates): chunks read; chunks left unread after
# an exit (None where the length in chunks is unknown: a streamed uri that exited); memory turns
# not kept; the chunk whose turn ended the reading (None: read to the end); malformed markers.
# Ungated: chunks_read == memory_updates, chunks_unread 0, exit_chunk None, malformed 0.
GATE_FIELDS = ("chunks_read", "chunks_unread", "memory_updates", "exit_chunk", "malformed")


@dataclass(frozen=True, slots=True)
class Answered:
    """A document answered by a replica: /v1/answer's body (and its streamed `answer` event's)
    and, through OutputRow.answered, a batch row."""

    answer: str
    prediction: str | None
    turns: int
    doc_tokens: int
    seconds: float
    model_version: int
    chunks_read: int
    chunks_unread: int | None
    memory_updates: int
    exit_chunk: int | None
    malformed: int
    memory: list[str]

    def body(self, show_memory: bool) -> dict:
        """The JSON body; the memory after each chunk only when asked for (it can be long)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not show_memory:
            out.pop("memory")
        return out


@dataclass(frozen=True, slots=True)
class OutputRow:
    """One answered input row, as a shard stores it; a row that could not be answered has
    `error` and zero counts. The parquet schema is derived from these fields."""

    id: str
    question: str | None
    doc_id: str | None
    answer: str | None = None
    prediction: str | None = None
    memory: list[str] | None = None
    turns: int = field(default=0, metadata={"arrow": pa.int32()})
    tokens: int = 0  # document tokens read
    seconds: float = 0.0
    model_version: int | None = None
    error: str | None = None
    # GATE_FIELDS; shards written before chunks_unread and malformed lack their columns (jobs.shard_counts)
    chunks_read: int = field(default=0, metadata={"arrow": pa.int32()})
    memory_updates: int = field(default=0, metadata={"arrow": pa.int32()})
    exit_chunk: int | None = field(default=None, metadata={"arrow": pa.int32()})
    chunks_unread: int | None = field(default=0, metadata={"arrow": pa.int32()})
    malformed: int = field(default=0, metadata={"arrow": pa.int32()})

    @classmethod
    def failed(cls, row: dict, error: str | None, model_version: int | None = None) -> OutputRow:
        return cls(row["id"], row.get("question"), row.get("doc_id"), model_version=model_version, error=error)

    @classmethod
    def answered(cls, row: dict, a: Answered) -> OutputRow:
        return cls(row["id"], row.get("question"), row.get("doc_id"), a.answer, a.prediction, a.memory, a.turns,
                   a.doc_tokens, a.seconds, a.model_version, **{k: getattr(a, k) for k in GATE_FIELDS})
