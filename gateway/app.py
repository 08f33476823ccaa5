"""The data plane: a lean ASGI app serving /v1/chat/completions, /v1/models, /healthz, /readyz, /metrics.

Request path: auth (key hash -> snapshot) -> guardrails -> routing rule -> alias ->
breaker decision and fallback -> upstream (over gateway.upstream's own HTTP/1.1 transport) ->
outcome to the breaker -> response with attribution headers -> one log record. No database,
no templates.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.attempts import ADAPTERS, AttemptLoop
from gateway.bodies import MIB, BodyBudget, BodyError, BodyLimits, check_chat, parse_body, wide_numbers
from gateway.clients import ANTHROPIC_JSON, AnthropicClientSend, anthropic_refusal
from gateway.config import ConfigHolder
from gateway.errors import openai_error, sse_error
from gateway.exchange import DISCONNECT_HOOKS, ClientGone, Exchange, Reject, SendTracker, respond
from gateway.heap import settle_heap
from gateway.logsink import LogSink, new_request_id
from gateway.metrics import CONTENT_TYPE, FORBIDDEN_BODY, GatewayMetrics, bearer_secret
from gateway.snapshot import KeyInfo, ProviderInfo, Refusal, Route, Snapshot
from gateway.translate import TranslationError, anthropic_to_openai_request
from gateway.upstream.base import Adapter
from gateway.upstream.transport import FastTransport
from health.breaker.base import BreakerEngine

log = logging.getLogger(__name__)

DEFAULT_MAX_BODY = 10 * 1024 * 1024
DEFAULT_BODY_BUFFER = 64 * MIB
# How long a large body may wait for room in the body budget before the gateway answers 503.
BODY_WAIT_SECONDS = 30.0
# How long a client may take to send its whole body (GATEWAY_BODY_READ_TIMEOUT_SECONDS) before a 408:
# a 10 MiB body needs at least 350 KB/s. Bounds how long a slow client holds budget and memory.
BODY_READ_TIMEOUT_SECONDS = 30.0
# Bodies larger than this, or with more commas (past the first of each container every value follows
# one, so they measure the work of the parse and its checks), are parsed in a worker thread: inline,
# checking them would cost the event loop more than a few hundred µs (bench/body_parse.py).
THREAD_BYTES = 64 * 1024
THREAD_VALUES = 5_000
MAX_MODEL_NAME = 256
# Model names travel in response headers and logs: printable, no control characters.
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]+")
_TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]


class GatewayApp:
    def __init__(
        self,
        *,
        config: ConfigHolder,
        engine: BreakerEngine | None = None,
        sink: LogSink | None = None,
        max_body: int = DEFAULT_MAX_BODY,
        deadline_seconds: float = 300.0,
        limits: BodyLimits | None = None,
        body_buffer: int = DEFAULT_BODY_BUFFER,
        body_wait_seconds: float = BODY_WAIT_SECONDS,
        body_read_timeout: float = BODY_READ_TIMEOUT_SECONDS,
        console_metrics: bool = False,
        gc_young_threshold: int = 0,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._engine = engine
        self.sink = sink
        self.max_body = max_body
        self.deadline = deadline_seconds
        self.limits = limits or BodyLimits()
        # Large bodies share this many bytes per worker (never less than one maximal body).
        self.body_budget = BodyBudget(max(body_buffer, max_body))
        self.body_wait = body_wait_seconds
        self.body_read_timeout = body_read_timeout
        self._parse_lock: asyncio.Lock | None = None
        self._transports: dict[str, FastTransport] = {}
        self._adapters: dict[str, tuple[ProviderInfo, Adapter]] = {}
        self.started = False
        # The collector's setting once started (gateway/heap.py); 0 leaves it alone (tests, embedding).
        self.gc_young_threshold = gc_young_threshold
        # /metrics (gateway/metrics.py); `console_metrics` adds the console's (embedded mode: one process).
        self.metrics = GatewayMetrics(config=config, engine=lambda: self.engine, sink=sink, console=console_metrics)
        # What to call and calling it (gateway/attempts.py). `clock` and `sleep` time the resilience policy's
        # backoff and Retry-After waits, `rng` their jitter: injectable so tests replay them exactly.
        self.attempts = AttemptLoop(
            engine=lambda: self.engine,
            adapter=self._adapter,
            renamed_now=_renamed_now,
            renamed_in_thread=self._renamed_in_thread,
            release_body=self._release_body,
            log=self._log,
            deadline_seconds=deadline_seconds,
            clock=clock,
            sleep=sleep,
            rng=rng,
        )

    @property
    def engine(self) -> BreakerEngine:
        if self._engine is None:
            from health.breaker import get_engine

            self._engine = get_engine()
        return self._engine

    # -- lifecycle -----------------------------------------------------------------
    async def startup(self) -> None:
        if self.started:
            return
        await asyncio.to_thread(self.config.start)
        # Building the engine reads the breaker configuration from the database: not on the loop.
        await asyncio.to_thread(lambda: self.engine)
        if self.sink is not None:
            self.sink.start()
            self.sink.ship_from(asyncio.get_running_loop())  # production: full batches leave from this loop
        self.metrics.start()
        self.started = True
        # Last: what startup loaded (settings, snapshot, engine) is frozen out of the collector's view.
        settle_heap(self.gc_young_threshold)

    async def shutdown(self) -> None:
        # Every step runs even if one before it failed, or the shutdown was cancelled during it: the log sink's
        # records are written or spilled, and the threads stopped, whatever happened before. Steps in order: the
        # body's, then the callbacks last pushed first.
        async with contextlib.AsyncExitStack() as steps:
            steps.push_async_callback(asyncio.to_thread, self.config.stop)
            steps.push_async_callback(asyncio.to_thread, self.metrics.stop)
            if self.sink is not None:
                # Drains, or spills, what is left, after the event loop's send in progress.
                steps.push_async_callback(asyncio.to_thread, self.sink.stop)
                steps.push_async_callback(self.sink.aclose)
            engine = self._engine
            if engine is not None and hasattr(engine, "flush"):
                # Outcomes still queued for Redis (a probe's result among them) are sent before exiting.
                await asyncio.to_thread(engine.flush)
            for transport in self._transports.values():
                await transport.aclose()
            self._transports.clear()
            self._adapters.clear()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self.handle(scope, receive, send)
        elif kind == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    try:
                        await self.startup()
                    except Exception as exc:  # noqa: BLE001 - report to the server, which exits
                        await send({"type": "lifespan.startup.failed", "message": str(exc)})
                        return
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await self.shutdown()
                    await send({"type": "lifespan.shutdown.complete"})
                    return

    async def handle(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        path, method = scope["path"], scope["method"]
        if path == "/v1/chat/completions":
            if method != "POST":
                await respond(send, 405, openai_error("Use POST for /v1/chat/completions."))
                return
            await self._chat(scope, receive, send)
        elif path == "/v1/messages":
            if method != "POST":
                await _respond_anthropic(send, 405, "Use POST for /v1/messages.")
                return
            await self._chat(scope, receive, send, anthropic=True)
        elif path.startswith("/v1/messages/"):
            # Anthropic's other Messages endpoints (count_tokens, batches): its SDK reads an error in its own shape.
            await _respond_anthropic(send, 404, f"Unknown endpoint {method} {path}: this gateway serves /v1/messages.")
        elif path == "/v1/models" and method == "GET":
            await self._models(scope, send)
        elif path == "/healthz":
            await respond(send, 200, b'{"status":"ok"}')
        elif path == "/readyz":
            await self._ready(send)
        elif path == "/metrics" and method == "GET":
            await self._metrics(scope, send)
        else:
            await respond(send, 404, openai_error(f"Unknown endpoint {method} {path}.", code="unknown_url"))

    async def _ready(self, send: Any) -> None:
        """Readiness, with a status and a short code per check; exception text stays in the server log."""
        snap = self.config.current
        checks = {
            "config_snapshot": "ok" if snap is not None else "missing",
            "config_stale": self.config.last_error_code or "ok",
        }
        body: dict[str, Any] = {"ready": False, "config_version": None, "missing": ["config snapshot"]}
        if snap is not None:
            missing = [
                name
                for name, present in (("api keys", snap.keys), ("models", snap.models), ("providers", snap.providers))
                if not present
            ]
            body = {"ready": not missing, "config_version": snap.version, "missing": missing}
        if self.sink is not None:
            counts = await asyncio.to_thread(self.sink.counts)
            checks["request_log_writes"] = "failing" if self.sink.failing else "ok"
            if counts.get("redis_up") == 0:
                checks["request_log_redis"] = "redis_unreachable"
            body["request_logs"] = counts
        body = {"status": "ready" if body["ready"] else "not_ready", **body, "checks": checks}
        await respond(send, 200 if body["ready"] else 503, orjson.dumps(body))

    async def _metrics(self, scope: dict[str, Any], send: Any) -> None:
        """Prometheus text (gateway/metrics.py), for an allowed network or an admin console token; else 403."""
        allowed = self.metrics.client_allowed(scope.get("client"))
        if not allowed and (secret := bearer_secret(scope["headers"])) is not None:
            allowed = await self.metrics.token_allowed(scope.get("client"), secret)
        if not allowed:
            await respond(send, 403, FORBIDDEN_BODY, headers=_TEXT_HEADERS)
            return
        body = await asyncio.to_thread(self.metrics.render)
        await respond(send, 200, body, headers=[(b"content-type", CONTENT_TYPE.encode())])

    # -- auth ----------------------------------------------------------------------
    def _authenticate(self, scope: dict[str, Any], snap: Snapshot) -> KeyInfo:
        """The gateway key from `Authorization: Bearer <key>`, or `x-api-key: <key>` (the Anthropic SDK's)."""
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
                break
            if name == b"x-api-key" and value.strip():
                header = b"Bearer " + value.strip()
        if not header:
            raise Reject(
                401,
                "Missing API key: send it as `Authorization: Bearer <key>` (or `x-api-key: <key>`).",
                code="missing_api_key",
            )
        scheme, _, secret = header.partition(b" ")
        if scheme.lower() != b"bearer" or not secret.strip():
            raise Reject(401, "Malformed Authorization header: expected `Bearer <key>`.", code="invalid_api_key")
        key = snap.keys.get(hashlib.sha256(secret.strip()).hexdigest())
        if key is None:
            raise Reject(401, "Invalid or revoked API key.", code="invalid_api_key")
        return key

    async def _models(self, scope: dict[str, Any], send: Any) -> None:
        snap = self.config.current
        if snap is None:
            await respond(
                send, 503, openai_error("The gateway has not loaded its configuration yet.", kind="server_error")
            )
            return
        try:
            key = self._authenticate(scope, snap)
        except Reject as exc:
            await respond(send, exc.status, openai_error(exc.message, kind="invalid_request_error", code=exc.code))
            return
        data = []
        for name in snap.models_for(key):
            model = snap.models.get(name)
            owner = model.provider if model else "alias"
            # One list both SDKs read: OpenAI's fields (object, created, owned_by) and Anthropic's (type,
            # display_name, created_at); each ignores the other's.
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": 0,
                    "owned_by": owner,
                    "type": "model",
                    "display_name": name,
                    "created_at": "1970-01-01T00:00:00Z",
                }
            )
        listing = {
            "object": "list",
            "data": data,
            "has_more": False,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
        }
        await respond(send, 200, orjson.dumps(listing))

    # -- chat ------------------------------------------------------------------------
    async def _chat(self, scope: dict[str, Any], receive: Any, send: Any, *, anthropic: bool = False) -> None:
        """One chat request. `anthropic`: it came as a Messages request and is answered in that shape
        (gateway/clients.py); everything in between works in the OpenAI shape."""
        call = Exchange(request_id=new_request_id(), started=time.perf_counter(), created_at=time.time())
        client = AnthropicClientSend(send, model="") if anthropic else None
        sent = SendTracker(client or send)
        try:
            await self._chat_inner(call, scope, receive, sent, client)
        except ClientGone:
            call.status, call.error_kind = 499, "client_disconnected"
        except Reject as exc:
            call.status = exc.status
            call.error_kind = exc.code or "rejected"
            self._log(call)
            await respond(
                sent,
                exc.status,
                openai_error(exc.message, kind=exc.kind, code=exc.code, param=exc.param),
                extra=[(b"x-vidai-request-id", call.request_id.encode())],
            )
        except Exception:
            log.exception("gateway: unexpected error in request %s", call.request_id)
            call.status, call.error_kind = 500, "gateway_error"
            self._log(call)
            if not sent.started:
                await respond(
                    sent,
                    500,
                    openai_error(
                        "The gateway failed to handle this request.", kind="server_error", code="gateway_error"
                    ),
                    extra=[(b"x-vidai-request-id", call.request_id.encode())],
                )
            elif not sent.finished:
                await sent(
                    {
                        "type": "http.response.body",
                        "more_body": False,
                        "body": sse_error("The gateway failed mid-stream.", code="gateway_error"),
                    }
                )
        finally:
            self._release_body(call)
            self._log(call)

    async def _chat_inner(
        self, call: Exchange, scope: dict[str, Any], receive: Any, send: Any, client: AnthropicClientSend | None
    ) -> None:
        snap = self.config.current
        if snap is None:
            raise Reject(
                503,
                "The gateway has not loaded its configuration yet; retry shortly.",
                kind="server_error",
                code="not_ready",
            )
        call.key = self._authenticate(scope, snap)
        call.raw = await self._read_body(call, scope, receive)
        payload, odd_numbers = await self._parse(call.raw)
        if client is not None:
            # Noted before the translation's own refusals, so that their log says what was asked for.
            call.requested_model = _usable_model(payload.get("model")) or ""
            call.stream = payload.get("stream") is True
            payload = await self._from_anthropic(call, payload, odd_numbers)
            client.model = str(payload.get("model") or "")
            client.stream = call.stream  # the request says whether the response is a stream, not the upstream
            call.shape = client.prepare
            odd_numbers = False  # refused above: a Messages request is always re-serialised
        named = payload.get("model")
        model = _usable_model(named)
        if model is None:
            if not isinstance(named, str) or not named.strip():
                raise Reject(400, "Missing required parameter: 'model'.", code="missing_model", param="model")
            raise Reject(
                400,
                f"Invalid 'model': at most {MAX_MODEL_NAME} printable characters.",
                code="invalid_model",
                param="model",
            )
        # Known from here on, so the log of a request refused for its other fields still says what it asked for.
        call.requested_model = model
        stream = payload.get("stream")
        if stream is not None and stream is not True and stream is not False:
            # Read as it is, `1` or "true" would be a whole answer to the gateway and a stream to an upstream
            # that takes any truthy value: the answer would fail here and count against the provider.
            raise Reject(400, "Invalid type for 'stream': expected a boolean.", code="invalid_type", param="stream")
        call.stream = stream is True
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise Reject(
                400,
                "Missing required parameter: 'messages' (a non-empty list).",
                code="missing_messages",
                param="messages",
            )
        # Only the raw bytes travel on: the parsed body (several times their size) goes before the upstream call.
        del payload, messages
        route = snap.resolve(call.key, model)
        if isinstance(route, Refusal):
            raise Reject(route.status, route.message, kind=route.kind, code=route.code, param="model")
        call.route = route
        if odd_numbers and _may_rename(route, model) and await self._wide_numbers(call.raw):
            raise Reject(
                400,
                "The request body holds a number beyond 64-bit range or with a three-digit exponent; "
                "this route re-addresses the request to another model, which would change it.",
                code="number_out_of_range",
            )
        await self._proxy_watching_disconnect(call, snap, scope, receive, send)

    async def _from_anthropic(self, call: Exchange, payload: dict[str, Any], odd_numbers: bool) -> dict[str, Any]:
        """A Messages request in the canonical (OpenAI) shape; `call.raw` becomes its bytes. A parameter with
        no OpenAI counterpart is refused here, before any upstream call, with a 400 naming it."""
        max_tokens = payload.get("max_tokens")
        if type(max_tokens) is not int or max_tokens < 1:
            raise Reject(
                400, "max_tokens: a positive integer is required.", code="missing_max_tokens", param="max_tokens"
            )
        if odd_numbers and await self._wide_numbers(call.raw):
            raise Reject(
                400,
                "The request body holds a number beyond 64-bit range or with a three-digit exponent, which "
                "translating it would change.",
                code="number_out_of_range",
            )
        try:
            canonical = anthropic_to_openai_request(payload, max_tokens_param="max_tokens")
        except TranslationError as exc:
            raise Reject(400, f"{exc.param}: {exc.message}", code="unsupported_parameter", param=exc.param) from None
        try:
            check_chat(canonical, self.limits)  # the translation may unfold blocks into messages and tool calls
        except BodyError as exc:
            raise Reject(400, exc.message, code=exc.code, param=exc.param) from None
        if len(call.raw) <= THREAD_BYTES:
            call.raw = orjson.dumps(canonical)
        else:
            call.raw = await self._in_thread(orjson.dumps, canonical)
        return canonical

    async def _read_body(self, call: Exchange, scope: dict[str, Any], receive: Any) -> bytes:
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise Reject(400, "Malformed Content-Length header.", code="invalid_request") from None
                if declared > self.max_body:
                    raise Reject(413, _too_large(self.max_body), code="request_too_large")
                break
        if declared is None or declared > self.limits.large_body:
            # Room for the body (the limit when its length is not declared) before a byte of it is read:
            # a waiting body stays in the client's socket, not in this worker.
            try:
                call.budget = await self.body_budget.acquire(
                    self.max_body if declared is None else declared, self.body_wait
                )
            except TimeoutError:
                raise Reject(
                    503,
                    "The gateway is busy with other large requests; retry shortly.",
                    kind="server_error",
                    code="overloaded",
                ) from None
        try:
            async with asyncio.timeout(self.body_read_timeout):
                raw = await self._receive_body(receive)
        except TimeoutError:
            log.warning(
                "gateway: request %s: the client sent its body too slowly (over %g s); answering 408",
                call.request_id,
                self.body_read_timeout,
            )
            raise Reject(
                408,
                f"The request body did not arrive within {self.body_read_timeout:g} seconds.",
                code="request_timeout",
            ) from None
        # The body's real size from now on: a small one gives all its room back, a large one the difference.
        if call.budget:
            keep = len(raw) if len(raw) > self.limits.large_body else 0
            if keep < call.budget:
                self.body_budget.release(call.budget - keep)
                call.budget = keep
        return raw

    async def _receive_body(self, receive: Any) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise Reject(413, _too_large(self.max_body), code="request_too_large")
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _parse(self, raw: bytes) -> tuple[dict[str, Any], bool]:
        """parse_body; a large or many-valued body in a worker thread, one at a time (see _in_thread)."""
        try:
            if _small(raw):
                return parse_body(raw, self.limits)
            return await self._in_thread(functools.partial(parse_body, raw, self.limits, slice_bytes=MIB))
        except BodyError as exc:
            raise Reject(400, exc.message, code=exc.code, param=exc.param) from None

    async def _in_thread[T, *Ts](self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Run `fn` in a worker thread, one at a time, so the event loop never waits on two (orjson holds the GIL)."""
        if self._parse_lock is None:
            self._parse_lock = asyncio.Lock()
        async with self._parse_lock:
            return await asyncio.to_thread(fn, *args)

    def _release_body(self, call: Exchange) -> None:
        """The body is gone (written upstream or refused): drop it and give its room back."""
        call.raw = b""
        if call.budget:
            self.body_budget.release(call.budget)
            call.budget = 0

    async def _proxy_watching_disconnect(
        self, call: Exchange, snap: Snapshot, scope: dict[str, Any], receive: Any, send: Any
    ) -> None:
        """Run the upstream work in this task; if the client disconnects first, cancel it (the upstream call too).

        The gateway's own server calls a hook when the connection is lost (gateway/server.py); under any other
        ASGI server, or when the connection was lost before this (its server then took the hook list away), a
        second task waits for `http.disconnect` from `receive()`."""
        task = asyncio.current_task()
        assert task is not None
        state = {"done": False, "gone": False}

        def gone() -> None:
            # Same event loop: this runs only while the work is suspended, so `done` is exact.
            if not state["done"]:
                state["gone"] = True
                task.cancel()

        async def watch() -> None:
            await _wait_disconnect(receive)
            gone()

        hooks = (scope.get("extensions") or {}).get(DISCONNECT_HOOKS)
        if hooks is not None:
            hooks.append(gone)
            watcher = None
        else:
            watcher = asyncio.ensure_future(watch())
        try:
            await self.attempts.run(call, snap, send)
        except asyncio.CancelledError:
            if state["gone"]:
                task.uncancel()
                raise ClientGone from None
            raise  # our own cancellation (shutdown): let it through
        finally:
            state["done"] = True
            if watcher is not None:
                watcher.cancel()

    async def _wide_numbers(self, raw: bytes) -> bool:
        if len(raw) <= THREAD_BYTES:
            return wide_numbers(raw)
        return await self._in_thread(wide_numbers, raw)

    async def _renamed_in_thread(self, raw: bytes, model: str) -> bytes:
        """The body for another model, parsed again and re-serialised in a worker thread (one too large for
        `_renamed_now`)."""
        return await self._in_thread(_with_model, raw, model)

    def _adapter(self, provider: ProviderInfo) -> Adapter:
        """One adapter per provider configuration, one connection pool per provider."""
        cached = self._adapters.get(provider.name)
        # Equality covers every field, credential_unavailable included: an adapter built while the key
        # decrypted (or was empty) never serves a configuration whose key does not, nor the reverse.
        if cached is not None and cached[0] == provider:
            return cached[1]
        transport = self._transports.get(provider.name)
        if transport is None:
            transport = self._transports[provider.name] = FastTransport()
        adapter = ADAPTERS[provider.protocol](provider, transport)
        self._adapters[provider.name] = (provider, adapter)
        return adapter

    def _log(self, call: Exchange) -> None:
        """Hand the record to the sink and the metrics once, before the response's last bytes go out. Never raises."""
        if call.logged:
            return
        call.logged = True
        try:
            record = self._log_record(call)
        except Exception:
            log.exception("gateway: could not build the log record of %s", call.request_id)
            return
        if self.sink is not None:
            self.sink.add(record)
        self.metrics.add(record)

    def _log_record(self, call: Exchange) -> dict[str, Any]:
        """The request-log record of one call, as the sink ships it."""
        route, key, served = call.route, call.key, call.served
        cost = None
        snap = self.config.current
        if served is not None and snap is not None:
            model = snap.models.get(served.model)
            cost = model.cost(call.tokens_in, call.tokens_out) if model else None
        return {
            "request_id": call.request_id,
            "created_at": call.created_at,
            "key_id": key.id if key else None,
            "user_id": key.user_id if key else None,
            "team_id": key.team_id if key else None,
            "application_id": key.application_id if key else None,
            "agent_id": key.agent_id if key else None,
            "requested_model": call.requested_model[:128],
            "routed_model": route.routed_model if route else "",
            "served_provider": served.provider if served else "",
            "served_model": served.model if served else "",
            "chain_step": call.chain_step,
            "chain_id": route.chain.id if route and route.chain and call.fallback else None,
            "fallback_triggered": call.fallback,
            "optimistic_primary": call.optimistic,
            "fallback_from_provider": route.primary.provider if route and call.fallback else "",
            "fallback_original_model": route.primary.model if route and call.fallback else "",
            "status": call.status or 500,
            "stream": call.stream,
            "latency_ms": round((time.perf_counter() - call.started) * 1000, 3),
            "ttfb_ms": round(call.ttfb, 3) if call.ttfb is not None else None,
            "tokens_in": call.tokens_in,
            "tokens_out": call.tokens_out,
            "cost_usd": cost,
            "error_kind": call.error_kind,
            "attempts": call.attempts,
        }


def _usable_model(value: Any) -> str | None:
    """`value` if it can name a model: a non-blank string of at most MAX_MODEL_NAME printable characters."""
    if isinstance(value, str) and value.strip() and len(value) <= MAX_MODEL_NAME and _PRINTABLE.fullmatch(value):
        return value
    return None


def _with_model(raw: bytes, model: str) -> bytes:
    payload = orjson.loads(raw)
    payload["model"] = model
    return orjson.dumps(payload)


def _renamed_now(raw: bytes, model: str) -> bytes | None:
    """The body for another model when it is small enough to re-serialise in the event loop, else None (then
    GatewayApp._renamed_in_thread does it). A plain call: the common case costs no coroutine."""
    return _with_model(raw, model) if _small(raw) else None


def _small(raw: bytes) -> bool:
    """Whether a body is small enough to parse or re-serialise in the event loop: at most THREAD_BYTES bytes
    and THREAD_VALUES commas. A body shorter than THREAD_VALUES bytes cannot hold more commas: not counted."""
    size = len(raw)
    return size <= THREAD_VALUES or (size <= THREAD_BYTES and raw.count(b",") <= THREAD_VALUES)


def _may_rename(route: Route, model: str) -> bool:
    """Whether a call on this route may name another model upstream than the client did (alias or fallback)."""
    if route.primary.model != model:
        return True
    return route.chain is not None and any(entry.model != model for entry in route.chain.entries)


def _too_large(limit: int) -> str:
    return f"The request body is larger than the gateway's limit of {limit // (1024 * 1024)} MiB."


async def _respond_anthropic(send: Any, status: int, message: str) -> None:
    await respond(send, status, anthropic_refusal(status, message), headers=ANTHROPIC_JSON)


async def _wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


def create_app() -> GatewayApp:
    """The production gateway for the current settings (uvicorn factory)."""
    import django

    django.setup()
    from django.conf import settings

    return GatewayApp(
        config=ConfigHolder(redis_url=settings.REDIS_URL),
        sink=LogSink(
            redis_url=settings.REDIS_URL,
            stream_key=settings.REQUEST_LOG_STREAM,
            maxlen=settings.REQUEST_LOG_STREAM_MAXLEN,
            spill_dir=settings.REQUEST_LOG_SPILL_DIR,
        ),
        max_body=getattr(settings, "GATEWAY_MAX_BODY_BYTES", DEFAULT_MAX_BODY),
        deadline_seconds=getattr(settings, "GATEWAY_DEADLINE_SECONDS", 300.0),
        limits=BodyLimits.from_settings(settings),
        body_buffer=getattr(settings, "GATEWAY_BODY_BUFFER_BYTES", DEFAULT_BODY_BUFFER),
        body_read_timeout=getattr(settings, "GATEWAY_BODY_READ_TIMEOUT_SECONDS", BODY_READ_TIMEOUT_SECONDS),
        gc_young_threshold=settings.GATEWAY_GC_YOUNG_THRESHOLD,
    )
