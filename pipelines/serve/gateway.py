"""The HTTP face of the app (FastAPI inside Ray Serve): auth, limits, routes.

Every route checks the bearer token (when one is configured), reads the body with a size
limit and validates it, then hands the work to the agent replicas or the job manager
through Serve handles. Every failure is a 4xx/5xx with one line:
`{"error": {"message": ..., "type": ..., "code": status}}` (the OpenAI error shape).

`stream: true` answers with server-sent events once the request passed its checks (a bad
one still gets its 4xx); a failure later is an `error` event that ends the stream. A client
that disconnects cancels the replica's generator, so its loop stops and its slot is free.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from ray import serve

from pipelines.serve.access import Access, check_model
from pipelines.serve.follow import Follow, follow
from pipelines.serve.schema import AnswerRequest, ChatRequest, JobRequest, ReloadRequest, Reply, ServeError, parse_body

app = FastAPI(title="memagent serve", version="1",
              description="MemAgent memory agents: answers over documents of any length, batch QA jobs, "
                          "and an OpenAI-compatible chat endpoint.")


@dataclass(frozen=True)
class GatewaySettings:
    token: str | None
    max_request_bytes: int
    retry_after_s: int
    state_dir: str
    follow: Follow | None = None  # serving models:/NAME@ALIAS with serve.follow_alias
    access: Access = Access()  # where a reload's folder or s3:// model may lie
    models: tuple[str, ...] = ()  # registry and store names a reload may name


def body_doc(model) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": model.model_json_schema()}}}}


# A request's document that cannot be read (serve/documents.py raises domain errors by kind) as
# HTTP: decided here, where HTTP is.
DOCUMENT_STATUS = {"invalid": 400, "missing": 422, "not_found": 404, "too_long": 413}


def http_status(reply: Reply) -> int:
    return DOCUMENT_STATUS[reply.kind] if reply.kind in DOCUMENT_STATUS else reply.status


def error_body(message: str, status: int) -> dict:
    kind = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
            413: "request_too_large", 503: "overloaded"}.get(status, "invalid_request_error")
    if status >= 500 and status != 503:
        kind = "server_error"
    return {"error": {"message": message, "type": kind, "code": status}}


def error_response(message: str, status: int, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(error_body(message, status), status, headers=headers)


def sse(data: dict | str, event: str | None = None) -> str:
    """One server-sent event: `event: NAME` (when named) and one `data:` line."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n"


def answer_frame(item) -> str:
    """/v1/answer events are named (start, turn, kept, answer, error); their data says so too."""
    if isinstance(item, Reply):
        return sse({"event": "error", **error_body(item.error, http_status(item))}, "error")
    return sse(item, item["event"])


def chat_frame(item) -> str:
    """OpenAI's stream: unnamed events, an error as `{"error": ...}`."""
    return sse(error_body(item.error, http_status(item)) if isinstance(item, Reply) else item)


async def events(gen, first, frame: Callable[[object], str], last: str | None) -> AsyncIterator[str]:
    """A replica's stream as SSE text; ends at its first error. Closing it (the client left)
    cancels the replica's generator."""
    from ray.exceptions import RayActorError

    try:
        item = first
        while item is not None:
            yield frame(item)
            if isinstance(item, Reply):
                return
            item = await anext(gen, None)
        if last:
            yield last
    except RayActorError as e:
        yield frame(Reply(status=503, error=f"replica unavailable ({e.__class__.__name__}); retry later"))
    finally:
        gen.cancel()


async def read_limited(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ServeError(f"request body: {declared} bytes > limit of {limit}", 413)
    body = bytearray()
    async for piece in request.stream():
        body.extend(piece)
        if len(body) > limit:
            raise ServeError(f"request body: over the limit of {limit} bytes", 413)
    return bytes(body)


@serve.deployment(name="Gateway")
@serve.ingress(app)
class Gateway:
    async def __init__(self, agent, jobs, settings: GatewaySettings):
        self.agent, self.jobs, self.s = agent, jobs, settings
        self.streams = agent.options(stream=True)
        if settings.follow is not None:
            self._follower = asyncio.get_running_loop().create_task(
                follow(settings.follow, self._served, self._reload_to))

    async def _served(self) -> str:
        return (await self.agent.info.remote())["model"]

    async def _reload_to(self, model: str) -> bool:
        reply = await self._reload(ReloadRequest(model=model))
        return reply.error is None

    def _auth(self, request: Request, admin: bool = False) -> None:
        if self.s.token is None:
            if admin:
                raise ServeError("admin: no token configured; set one to allow reloads", 403)
            return
        given = request.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.s.token}".encode()):
            raise ServeError("authorization: missing or wrong bearer token", 401)

    async def _call(self, request: Request, work, model=None, admin: bool = False) -> Response:
        from ray.exceptions import RayActorError
        from ray.serve.exceptions import BackPressureError

        retry = {"Retry-After": str(self.s.retry_after_s)}
        try:
            self._auth(request, admin)
            body = parse_body(await read_limited(request, self.s.max_request_bytes), model,
                              self.s.max_request_bytes) if model else None
            reply = await work(body)
        except ServeError as e:
            headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
            return error_response(str(e), e.status, headers)
        except BackPressureError:
            return error_response("overloaded: too many requests in flight; retry later", 503, retry)
        except RayActorError as e:
            return error_response(f"replica unavailable ({e.__class__.__name__}); retry later", 503, retry)
        if isinstance(reply, Response):
            return reply
        if reply.error is not None:
            return error_response(reply.error, http_status(reply))
        return JSONResponse(reply.body, reply.status)

    async def _stream(self, gen, frame: Callable[[object], str], last: str | None = None) -> Reply | Response:
        """The replica's first item decides: a Reply (the request failed its checks) answers as
        any call does; anything else starts the event stream."""
        first = await anext(gen)
        if isinstance(first, Reply):
            return first
        return StreamingResponse(events(gen, first, frame, last), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/healthz")
    async def healthz(self, request: Request):
        async def work(_):
            return Reply({"status": "ok"})
        return await self._call(request, work)

    @app.get("/v1/models")
    async def models(self, request: Request):
        async def work(_):
            info = await self.agent.info.remote()
            card = {"id": info["model"], "object": "model", "created": int(time.time()),
                    "owned_by": "memagent", "version": info["version"]}
            return Reply({"object": "list", "data": [card]})
        return await self._call(request, work)

    @app.post("/v1/answer", openapi_extra=body_doc(AnswerRequest))
    async def answer(self, request: Request):
        async def work(body: AnswerRequest):
            if body.stream:
                return await self._stream(self.streams.answer_events.remote(body.model_dump()), answer_frame)
            return await self.agent.answer.remote(body.model_dump())
        return await self._call(request, work, AnswerRequest)

    @app.post("/v1/chat/completions", openapi_extra=body_doc(ChatRequest))
    async def chat(self, request: Request):
        async def work(body: ChatRequest):
            if body.stream:
                return await self._stream(self.streams.chat_events.remote(body.model_dump()), chat_frame,
                                          sse("[DONE]"))
            return await self.agent.chat.remote(body.model_dump())
        return await self._call(request, work, ChatRequest)

    @app.post("/v1/jobs", openapi_extra=body_doc(JobRequest))
    async def submit(self, request: Request):
        async def work(body: JobRequest):
            return await self.jobs.submit.remote(body.input, body.output)
        return await self._call(request, work, JobRequest)

    @app.get("/v1/jobs/{job_id}")
    async def job(self, job_id: str, request: Request):
        async def work(_):
            return await self.jobs.status.remote(job_id)
        return await self._call(request, work)

    @app.delete("/v1/jobs/{job_id}")
    async def cancel(self, job_id: str, request: Request):
        async def work(_):
            return await self.jobs.cancel.remote(job_id)
        return await self._call(request, work)

    @app.post("/v1/admin/reload", openapi_extra=body_doc(ReloadRequest))
    async def reload(self, request: Request):
        return await self._call(request, self._reload, ReloadRequest, admin=True)

    async def _reload(self, body: ReloadRequest) -> Reply:
        """Check the reference (confined as every input is) and the model on every replica, swap it
        in on all, then record it (replicas that restart later load it). Versions only go up.

        Broadcasts, not routed calls: a control-plane call must not be refused as overload
        when the replicas are busy with the traffic that the reload is meant not to drop.
        """
        from pipelines.serve.state import read_model_state, write_model_state

        try:
            check_model(body.model, self.s.access, self.s.models)
        except ServeError as e:
            return Reply.failure(e)
        checks = await self.agent.broadcast("resolve", body.model).results_async()
        failed = next((c for c in checks if c.error is not None), None)
        if failed:
            return failed
        current = read_model_state(self.s.state_dir)
        live = await self.agent.broadcast("info").results_async()
        served = max([i["version"] for i in live] + [current[1] if current else 0])
        if body.version is not None and body.version <= served:
            return Reply(status=409, error=f"version {body.version}: not above the served version {served}")
        version = body.version or served + 1
        replicas = await self.agent.broadcast("reload", body.model, version).results_async()
        if any(r["version"] == version for r in replicas):  # recorded once a replica serves it
            write_model_state(self.s.state_dir, body.model, version)
        return Reply({"model": body.model, "version": version, "replicas": replicas})
