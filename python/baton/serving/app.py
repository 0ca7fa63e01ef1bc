"""The OpenAI-compatible HTTP server: a FastAPI app over an AsyncLLM (`python -m baton serve` runs it under
uvicorn; baton.serving.cli).

    POST /v1/completions, /v1/chat/completions   OpenAI's bodies (baton.serving.protocol), streamed as
                                                 server-sent events when "stream" is true
    GET  /v1/models, /health, /metrics           the served model; 200 while the engine runs (503 after a
                                                 device failure); Prometheus text (baton.serving.metrics)

Every request goes to the device as soon as it arrives (the device batches them continuously); a prompt with n
completions or several prompts go in one all-or-none submit. A full request table answers 503 with
Retry-After and queues nothing. A client that goes away mid-stream cancels its requests on the device (their
KV pages return when they end, at their next step). With an API key, /v1/* needs `Authorization: Bearer KEY`.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from baton import errors
from baton.async_llm import AsyncLLM
from baton.llm import Request as LLMRequest
from baton.serving import protocol
from baton.serving.metrics import CONTENT_TYPE, Metrics
from baton.serving.protocol import ApiError, Defaults, GenerationRequest

# How long a client told the server is full should wait (Retry-After, seconds).
RETRY_AFTER_S = 1


class _Completion:
    """One completion being served: its device request and what the client was sent."""

    def __init__(self, index: int, request: LLMRequest, arrival: float) -> None:
        self.index, self.request, self.arrival = index, request, arrival
        self.first: Optional[float] = None
        self.text: List[str] = []
        self.finish_reason: Optional[str] = None
        self.text_offset = 0  # a streamed completion's logprobs: where its next token's text_offset starts


class _BearerAuth:
    """/v1/* needs `Authorization: Bearer KEY` (compared in constant time). A plain ASGI middleware: Starlette's
    BaseHTTPMiddleware would hide the client's disconnect from the routes (Request.is_disconnected), and a
    request whose client left must be cancelled."""

    def __init__(self, app: Any, key: str, refuse: Any) -> None:
        self.app, self.expected, self.refuse = app, f"Bearer {key}".encode(), refuse

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            given = dict(scope["headers"]).get(b"authorization", b"")
            if not hmac.compare_digest(given, self.expected):
                response = self.refuse(ApiError(401, "missing or incorrect API key: send 'Authorization: Bearer "
                                                     "<key>'", code="invalid_api_key"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def build_app(engine: AsyncLLM, served_name: str, *, model_path: Optional[str] = None,
              api_key: Optional[str] = None, max_body_bytes: int = 1 << 22,
              defaults: Optional[Defaults] = None) -> FastAPI:
    """The app. served_name (and model_path, when given) are the model names requests may name."""
    defaults = defaults or Defaults()
    names = {served_name} | ({model_path} if model_path else set())
    info = engine.info
    pool_tokens = info.get("kv_pool_pages", 0) * info.get("kv_page_tokens", 0) or info["max_context"]
    metrics = Metrics(engine.llm.stats, info, served_name)
    app = FastAPI(title="Baton", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine, app.state.metrics = engine, metrics
    created = int(time.time())

    def refuse(error: ApiError) -> JSONResponse:
        metrics.refusal(error.status)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, error: ApiError) -> JSONResponse:
        return refuse(error)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        message = (f"no route {request.method} {request.url.path}: Baton serves /v1/completions, "
                   "/v1/chat/completions, /v1/models, /health, /metrics") if error.status_code in (404, 405) \
            else str(error.detail)
        return refuse(ApiError(error.status_code, message))

    @app.exception_handler(Exception)
    async def _internal(_: Request, error: Exception) -> JSONResponse:
        return refuse(ApiError(500, f"internal error: {type(error).__name__}: {error}"))

    if api_key is not None:
        app.add_middleware(_BearerAuth, key=api_key, refuse=refuse)

    async def read_body(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            raise ApiError(413, f"the body is {length} bytes; the server takes at most {max_body_bytes} "
                                "(--max-body-bytes)", code="request_too_large")
        raw = bytearray()
        async for piece in request.stream():
            raw += piece
            if len(raw) > max_body_bytes:
                raise ApiError(413, f"the body is more than {max_body_bytes} bytes, the server's limit "
                                    "(--max-body-bytes)", code="request_too_large")
        return protocol.parse_body(bytes(raw))

    def check_model(name: Optional[str]) -> str:
        if name is not None and name not in names:
            raise ApiError(404, f"the model '{name}' does not exist: this server serves '{served_name}'",
                           "model", code="model_not_found")
        return served_name

    def prompt_ids(parsed: GenerationRequest) -> Tuple[List[List[int]], str]:
        """Token ids of every prompt, and the field they came from."""
        llm = engine.llm
        try:
            if parsed.chat_messages is not None:
                text = llm.tokenizer.apply_chat_template(parsed.chat_messages, parsed.add_generation_prompt)
                return [llm.tokenizer.encode(text, add_special_tokens=False)], "messages"
            return [llm.encode(p) for p in parsed.prompts], "prompt"
        except errors.InvalidArgumentError as e:  # no tokenizer.json
            raise ApiError(400, str(e), "messages" if parsed.chat_messages is not None else "prompt") from None
        except Exception as e:  # the template raised (raise_exception), or a tokenizer refusal
            raise ApiError(400, f"the chat template refused the messages: {e}", "messages") from None

    def check_logprobs(parsed: GenerationRequest) -> None:
        asked, most = parsed.sampling.logprobs, engine.llm.max_logprobs
        if asked is not None and (most == 0 or asked > most):
            served, fix = (f"at most {most} top alternatives", "ask for fewer") if most else \
                ("no log-probabilities", "leave it out")
            raise ApiError(400, f"'{parsed.logprobs_field}' asks for {asked} top alternatives; this server returns "
                                f"{served} (--max-logprobs {most}): {fix}", parsed.logprobs_field)

    def failure(error: Exception) -> ApiError:
        """A request the engine ended with an error (its logprobs lost, or the device failed)."""
        what = "the engine failed" if engine.error is not None else "the request failed"
        return ApiError(500, f"{what}: {error}")

    def submit(parsed: GenerationRequest) -> Tuple[List[_Completion], List[int]]:
        check_logprobs(parsed)
        ids, field = prompt_ids(parsed)
        vocab = info["vocab_size"]
        for i, p in enumerate(ids):
            bad = next((t for t in p if t >= vocab), None)
            if bad is not None:
                raise ApiError(400, f"prompt {i} holds token id {bad}; the vocabulary has {vocab}", field)
        fitted = [protocol.check_length(len(p), parsed, info["max_context"], pool_tokens, field) for p in ids]
        # One all-or-none submit per distinct fitted max_tokens (the prompts' lengths may differ).
        arrival = time.perf_counter()
        groups: Dict[Any, List[int]] = {}
        for i, s in enumerate(fitted):
            groups.setdefault(s, []).append(i)
        completions: List[_Completion] = []
        made: List[LLMRequest] = []
        try:
            for sampling, members in groups.items():
                requests = engine.submit([ids[i] for i in members], sampling)
                made += requests
                n = sampling.n
                for k, i in enumerate(members):
                    for j in range(n):
                        completions.append(_Completion(i * n + j, requests[k * n + j], arrival))
        except errors.ResourceExhaustedError as e:
            for r in made:
                r.cancel()
            raise ApiError(503, f"the server is at its request limit ({info['max_requests']} in flight): retry "
                                f"after {RETRY_AFTER_S} s ({e})", code="overloaded",
                           headers={"Retry-After": str(RETRY_AFTER_S)}) from None
        except errors.InvalidArgumentError as e:
            for r in made:
                r.cancel()
            raise ApiError(400, str(e), field) from None
        completions.sort(key=lambda c: c.index)
        return completions, [len(p) for p in ids]

    def done(c: _Completion, prompt_tokens: int) -> None:
        metrics.finished(c.arrival, c.first, time.perf_counter(), prompt_tokens, len(c.request.token_ids),
                         c.finish_reason or "length")

    def aborted(c: _Completion, prompt_tokens: int) -> None:
        if c.finish_reason is None:  # the client went away first
            c.finish_reason = "abort"
            done(c, prompt_tokens)

    async def merged(completions: List[_Completion], prompt_lens: List[int],
                     n: int) -> AsyncIterator[Tuple[_Completion, Any]]:
        """Every completion's deltas as they come, one stream."""
        queue: asyncio.Queue = asyncio.Queue()

        async def pump(c: _Completion) -> None:
            try:
                async for delta in engine.stream(c.request):
                    if delta.token_ids and c.first is None:
                        c.first = time.perf_counter()
                    if delta.finished:
                        c.finish_reason = delta.finish_reason
                    await queue.put((c, delta))
                done(c, prompt_lens[c.index // n])
            except asyncio.CancelledError:
                aborted(c, prompt_lens[c.index // n])
                raise
            except Exception as e:  # a device failure ends the stream with its message
                await queue.put((c, e))
            finally:
                await queue.put((c, None))

        tasks = [asyncio.ensure_future(pump(c)) for c in completions]
        open_ = len(tasks)
        try:
            while open_:
                c, item = await queue.get()
                if item is None:
                    open_ -= 1
                    continue
                yield c, item
        finally:
            for t in tasks:
                t.cancel()

    async def run_all(completions: List[_Completion], prompt_lens: List[int], n: int, client: Request) -> None:
        """Runs the completions to their end (their text in c.text); if the client disconnects first, cancels
        them (closing merged() cancels its pumps, whose streams cancel the device requests)."""
        async def collect() -> None:
            async for c, delta in merged(completions, prompt_lens, n):
                if isinstance(delta, Exception):
                    raise failure(delta)
                c.text.append(delta.text)

        async def watch() -> None:
            while not await client.is_disconnected():
                await asyncio.sleep(0.1)

        everything, watcher = asyncio.ensure_future(collect()), asyncio.ensure_future(watch())
        try:
            await asyncio.wait([everything, watcher], return_when=asyncio.FIRST_COMPLETED)
            if not everything.done():
                raise asyncio.CancelledError()
            everything.result()
        finally:
            watcher.cancel()
            everything.cancel()

    def usage_of(completions: List[_Completion], prompt_lens: List[int]) -> Dict[str, int]:
        return protocol.usage(sum(prompt_lens), sum(len(c.request.token_ids) for c in completions))

    @app.get("/health")
    async def health() -> Response:
        if engine.error is not None:
            return refuse(ApiError(503, f"the engine failed: {engine.error}"))
        return Response(status_code=200)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> Dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "created": created,
                                            "owned_by": "baton", "root": model_path or served_name,
                                            "max_model_len": info["max_context"]}]}

    async def accept(request: Request, parse: Any) -> Tuple[GenerationRequest, str, List[_Completion], List[int]]:
        """The body checked, the model named, the completions submitted (or the refusal)."""
        parsed = parse(await read_body(request), defaults)
        model = check_model(parsed.model)
        items, prompt_lens = submit(parsed)
        return parsed, model, items, prompt_lens

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        parsed, model, items, prompt_lens = await accept(request, protocol.parse_completion)
        n, rid, now = parsed.sampling.n, protocol.new_id("cmpl"), int(time.time())
        running = lambda: usage_of(items, prompt_lens) if parsed.continuous_usage else None  # noqa: E731
        echo = [engine.llm.tokenizer.decode(engine.llm.encode(p), skip_special_tokens=False)
                if isinstance(p, list) else p for p in parsed.prompts] if parsed.echo else None
        logprobs = parsed.sampling.logprobs is not None

        def logprobs_of(c: _Completion, token_ids: List[int], entries: Any) -> Optional[Dict[str, Any]]:
            if not logprobs:
                return None
            out, c.text_offset = protocol.completion_logprobs(token_ids, entries, c.text_offset)
            return out

        if not parsed.stream:
            await run_all(items, prompt_lens, n, request)
            choices = [protocol.completion_choice(c.index, (echo[c.index // n] if echo else "") + "".join(c.text),
                                                  c.finish_reason,
                                                  logprobs_of(c, c.request.token_ids, c.request.logprobs))
                       for c in items]
            return JSONResponse(protocol.completion_object(rid, model, choices, usage_of(items, prompt_lens),
                                                           created=now))

        async def events() -> AsyncIterator[bytes]:
            if echo:
                for c in items:
                    yield protocol.sse(protocol.completion_object(
                        rid, model, [protocol.completion_choice(c.index, echo[c.index // n], None)], None, True, now))
            async for c, delta in merged(items, prompt_lens, n):
                if isinstance(delta, Exception):
                    yield protocol.sse(failure(delta).body())
                    return
                # With logprobs, tokens whose text is still held back (half a character, a possible stop
                # string) get a chunk of their own, so every token's logprobs are sent.
                if delta.text or delta.finished or (logprobs and delta.token_ids):
                    reason = delta.finish_reason if delta.finished else None
                    choice = protocol.completion_choice(c.index, delta.text, reason,
                                                        logprobs_of(c, delta.token_ids, delta.logprobs))
                    yield protocol.sse(protocol.completion_object(rid, model, [choice], running(), True, now))
            if parsed.include_usage:
                yield protocol.sse(protocol.completion_object(rid, model, [], usage_of(items, prompt_lens), True,
                                                              now))
            yield protocol.sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        parsed, model, items, prompt_lens = await accept(request, protocol.parse_chat)
        n, rid, now = parsed.sampling.n, protocol.new_id("chatcmpl"), int(time.time())
        running = lambda: usage_of(items, prompt_lens) if parsed.continuous_usage else None  # noqa: E731
        logprobs = parsed.sampling.logprobs is not None
        if not parsed.stream:
            await run_all(items, prompt_lens, n, request)
            choices = [protocol.chat_choice(c.index, "".join(c.text), c.finish_reason,
                                            protocol.chat_logprobs(c.request.token_ids, c.request.logprobs)
                                            if logprobs else None) for c in items]
            return JSONResponse(protocol.chat_object(rid, model, choices, usage_of(items, prompt_lens), now))

        async def events() -> AsyncIterator[bytes]:
            for c in items:  # OpenAI's first chunk of each choice carries the role
                yield protocol.sse(protocol.chat_chunk(rid, model, now, [
                    protocol.chat_delta(c.index, {"role": "assistant", "content": ""}, None)]))
            async for c, delta in merged(items, prompt_lens, n):
                if isinstance(delta, Exception):
                    yield protocol.sse(failure(delta).body())
                    return
                if delta.text or (logprobs and delta.token_ids):  # every token's logprobs, as for completions
                    yield protocol.sse(protocol.chat_chunk(rid, model, now, [protocol.chat_delta(
                        c.index, {"content": delta.text}, None,
                        protocol.chat_logprobs(delta.token_ids, delta.logprobs) if logprobs else None)], running()))
                if delta.finished:
                    yield protocol.sse(protocol.chat_chunk(rid, model, now, [
                        protocol.chat_delta(c.index, {}, delta.finish_reason)], running()))
            if parsed.include_usage:
                yield protocol.sse(protocol.chat_chunk(rid, model, now, [], usage_of(items, prompt_lens)))
            yield protocol.sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    return app
