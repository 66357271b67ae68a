"""The HTTP front (FastAPI): OpenAI's completions and chat completions, streamed or whole, the model list,
health and metrics. Each request becomes a scheduler Job; the engine thread hands its events to the
request's asyncio queue.

A streamed response starts once the first event came, so a request that fails before its first token still
gets its status code; a client that goes away (streamed or not) cancels its job, which frees its row. The
events that wait when a stream is written go out in one write.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse

from accelerate_graph.serve.protocol import (
    ApiError,
    GenerationParams,
    TextFrames,
    bad,
    chunk,
    new_id,
    parse_request,
    read_body,
    sse,
    usage_chunk,
    whole_response,
)
from accelerate_graph.serve.scheduler import Event, Job, Scheduler

CLIENT_GONE = 499  # the status logged for a request whose client left (nobody reads it)


@dataclass
class Served:
    """What the front needs to know of the model: its name in requests, tokenizer, cache and vocabulary."""

    name: str
    tokenizer: object | None
    max_len: int
    vocab_size: int
    created: int = 0


def make_app(scheduler: Scheduler, served: Served) -> FastAPI:
    app = FastAPI(title="cugraph-accel", docs_url=None, redoc_url=None, openapi_url=None)
    metrics = scheduler.metrics
    served.created = served.created or int(time.time())

    @app.exception_handler(ApiError)
    async def api_error(_request: Request, err: ApiError) -> JSONResponse:
        return JSONResponse(err.body(), status_code=err.status)

    @app.get("/health")
    async def health() -> JSONResponse:
        if scheduler.draining:
            return JSONResponse({"status": "draining"}, status_code=503)
        return JSONResponse({"status": "ok"})

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        model = {
            "id": served.name,
            "object": "model",
            "created": served.created,
            "owned_by": "cugraph-accel",
            "max_model_len": served.max_len,
        }
        return JSONResponse({"object": "list", "data": [model]})

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await _generate(request, scheduler, served, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        return await _generate(request, scheduler, served, chat=True)

    return app


async def _generate(request: Request, scheduler: Scheduler, served: Served, chat: bool) -> Response:
    metrics = scheduler.metrics
    try:
        params = parse_request(read_body(await request.body()), served.name, chat)
        prompt = encode(params, served)
    except ApiError:
        metrics.request_done("bad_request")
        raise
    queue: asyncio.Queue[Event] = asyncio.Queue()
    loop = asyncio.get_running_loop()
    job = scheduler.new_job(prompt, params, queue.put_nowait, loop.call_soon_threadsafe)
    try:
        scheduler.submit(job)
    except ApiError as err:
        metrics.request_done("rejected_draining" if err.status == 503 else "rejected_full")
        raise
    request_id = new_id(chat)
    if params.stream:
        first = await _until_gone(request, queue.get(), scheduler, job)
        if first is None:
            return Response(status_code=CLIENT_GONE)
        if first.kind == "error":
            raise first.error
        return StreamingResponse(
            _chunks(first, queue, job, scheduler, request_id, served.name, params),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    whole = await _until_gone(request, _collect(queue), scheduler, job)
    if whole is None:
        return Response(status_code=CLIENT_GONE)
    text, finish, used = whole
    return JSONResponse(whole_response(request_id, served.name, chat, text, finish, used))


def encode(params: GenerationParams, served: Served) -> list[int]:
    """The prompt's token ids: the chat template's for messages; checked against the vocabulary and cache."""
    tokenizer = served.tokenizer
    if params.chat:
        if tokenizer is None or not getattr(tokenizer, "chat_template", None):
            raise bad(
                "messages",
                f"the model '{served.name}' has no chat template, so messages cannot be turned into a prompt; "
                "use /v1/completions with a prompt instead.",
                code="no_chat_template",
            )
        made = tokenizer.apply_chat_template(params.messages, add_generation_prompt=True, tokenize=True)
        ids = list(made["input_ids"] if hasattr(made, "keys") else made)
        param = "messages"
    elif isinstance(params.prompt, str):
        if tokenizer is None:
            raise bad("prompt", f"the model '{served.name}' has no tokenizer; send the prompt as token ids.")
        ids = list(tokenizer(params.prompt, add_special_tokens=True)["input_ids"])
        param = "prompt"
    else:
        ids = list(params.prompt)
        param = "prompt"
        if max(ids) >= served.vocab_size:
            raise bad(
                "prompt",
                f"'prompt' holds token id {max(ids)}, outside the vocabulary (ids 0 to {served.vocab_size - 1}).",
            )
    if not ids:
        raise bad(param, f"the '{param}' encodes to no token; give some text.")
    if len(ids) >= served.max_len:
        raise bad(
            param,
            f"the prompt is {len(ids)} tokens; this server's cache holds {served.max_len} a request, so a prompt "
            f"may have at most {served.max_len - 1}. Shorten it.",
            code="context_length_exceeded",
        )
    return ids


async def _until_gone(request: Request, work, scheduler: Scheduler, job: Job):
    """`work`'s result, or None when the client disconnected first (then its job is cancelled)."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not task.done():
            task.cancel()
            scheduler.cancel(job)
    return task.result() if not task.cancelled() else None


async def _disconnected(request: Request) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


async def _collect(queue: asyncio.Queue[Event]) -> tuple[str, str, dict]:
    parts = []
    while True:
        event = await queue.get()
        if event.kind == "text":
            parts.append(event.text)
        elif event.kind == "done":
            return "".join(parts), event.finish, event.usage
        else:
            raise event.error


async def _chunks(first: Event, queue, job: Job, scheduler: Scheduler, request_id: str, model: str, params):
    chat = params.chat
    text = TextFrames(request_id, model, chat)
    event = first
    try:
        if chat:
            yield sse(chunk(request_id, model, chat, "", role=True))
        while True:
            frames = []
            while event.kind == "text":
                frames.append(text(event.text))
                if queue.empty():
                    break
                event = queue.get_nowait()
            if event.kind == "done":
                frames.append(sse(chunk(request_id, model, chat, None, finish=event.finish)))
                if params.include_usage:
                    frames.append(sse(usage_chunk(request_id, model, chat, event.usage)))
            elif event.kind == "error":  # the status line went out already: the error is the stream's last event
                frames.append(sse(event.error.body()))
            if event.kind != "text":
                yield b"".join([*frames, sse("[DONE]")])
                return
            yield b"".join(frames)
            event = await queue.get()
    finally:
        scheduler.cancel(job)  # a no-op once it finished; a client that left frees its row
