"""The data plane: a lean ASGI app serving /v1/chat/completions, /v1/models, /healthz, /readyz, /metrics.

Request path: auth (key hash -> snapshot) -> guardrails -> routing rule -> alias ->
breaker decision and fallback -> upstream (over gateway.upstream's own HTTP/1.1 transport) ->
outcome to the breaker -> response with attribution headers -> one log record. No database,
no templates.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from core.crypto import credential_unavailable_message
from gateway.bodies import MIB, BodyBudget, BodyError, BodyLimits, parse_body, wide_numbers
from gateway.config import ConfigHolder
from gateway.errors import openai_error, sse_error
from gateway.logsink import LogSink, new_request_id
from gateway.metrics import CONTENT_TYPE, FORBIDDEN_BODY, GatewayMetrics, bearer_secret
from gateway.snapshot import KeyInfo, ProviderInfo, Refusal, Route, Snapshot, Target
from gateway.upstream.base import Adapter, UpstreamError, UpstreamResponse
from gateway.upstream.openai import OpenAIAdapter
from gateway.upstream.transport import FastTransport, RequestBody
from health.breaker.base import BreakerEngine
from health.breaker.types import Decision, Outcome

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
_JSON_HEADERS = [(b"content-type", b"application/json")]
_SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
_DONE = b"data: [DONE]"
ADAPTERS: dict[str, type[Adapter]] = {"openai": OpenAIAdapter}
_TEXT_HEADERS = [(b"content-type", b"text/plain; charset=utf-8")]


class _ClientGone(Exception):
    """The client disconnected before it was answered."""


class _Reject(Exception):
    """A request the gateway answers itself, before any upstream call."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.code, self.param = status, message, kind, code, param


@dataclass
class _Call:
    """Everything known about one chat request; becomes its log record."""

    request_id: str
    started: float
    created_at: float
    key: KeyInfo | None = None
    requested_model: str = ""
    route: Route | None = None
    stream: bool = False
    raw: bytes = b""  # the body as received, until it is written upstream (the parsed body is never kept)
    served: Target | None = None
    chain_step: int = 0
    fallback: bool = False
    optimistic: bool = False  # the primary was tried although its circuit (and every chain entry) was unavailable
    status: int = 0
    ttfb: float | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    error_kind: str = ""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    logged: bool = False
    budget: int = 0  # bytes of the body budget this request holds


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
        # /metrics (gateway/metrics.py); `console_metrics` adds the console's (embedded mode: one process).
        self.metrics = GatewayMetrics(config=config, engine=lambda: self.engine, sink=sink, console=console_metrics)

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
        self.metrics.start()
        self.started = True

    async def shutdown(self) -> None:
        engine = self._engine
        if engine is not None and hasattr(engine, "flush"):
            # Outcomes still queued for Redis (a probe's result among them) are sent before exiting.
            await asyncio.to_thread(engine.flush)
        for transport in self._transports.values():
            await transport.aclose()
        self._transports.clear()
        self._adapters.clear()
        if self.sink is not None:
            await asyncio.to_thread(self.sink.stop)
        await asyncio.to_thread(self.metrics.stop)
        await asyncio.to_thread(self.config.stop)

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
                await _respond(send, 405, openai_error("Use POST for /v1/chat/completions."))
                return
            await self._chat(scope, receive, send)
        elif path == "/v1/models" and method == "GET":
            await self._models(scope, send)
        elif path == "/healthz":
            await _respond(send, 200, b'{"status":"ok"}')
        elif path == "/readyz":
            await self._ready(send)
        elif path == "/metrics" and method == "GET":
            await self._metrics(scope, send)
        else:
            await _respond(send, 404, openai_error(f"Unknown endpoint {method} {path}.", code="unknown_url"))

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
        await _respond(send, 200 if body["ready"] else 503, orjson.dumps(body))

    async def _metrics(self, scope: dict[str, Any], send: Any) -> None:
        """Prometheus text (gateway/metrics.py), for an allowed network or an admin console token; else 403."""
        allowed = self.metrics.client_allowed(scope.get("client"))
        if not allowed and (secret := bearer_secret(scope["headers"])) is not None:
            allowed = await self.metrics.token_allowed(scope.get("client"), secret)
        if not allowed:
            await _respond(send, 403, FORBIDDEN_BODY, headers=_TEXT_HEADERS)
            return
        body = await asyncio.to_thread(self.metrics.render)
        await _respond(send, 200, body, headers=[(b"content-type", CONTENT_TYPE.encode())])

    # -- auth ----------------------------------------------------------------------
    def _authenticate(self, scope: dict[str, Any], snap: Snapshot) -> KeyInfo:
        header = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                header = value
                break
        if not header:
            raise _Reject(401, "Missing API key: send it as `Authorization: Bearer <key>`.", code="missing_api_key")
        scheme, _, secret = header.partition(b" ")
        if scheme.lower() != b"bearer" or not secret.strip():
            raise _Reject(401, "Malformed Authorization header: expected `Bearer <key>`.", code="invalid_api_key")
        key = snap.keys.get(hashlib.sha256(secret.strip()).hexdigest())
        if key is None:
            raise _Reject(401, "Invalid or revoked API key.", code="invalid_api_key")
        return key

    async def _models(self, scope: dict[str, Any], send: Any) -> None:
        snap = self.config.current
        if snap is None:
            await _respond(
                send, 503, openai_error("The gateway has not loaded its configuration yet.", kind="server_error")
            )
            return
        try:
            key = self._authenticate(scope, snap)
        except _Reject as exc:
            await _respond(send, exc.status, openai_error(exc.message, kind="invalid_request_error", code=exc.code))
            return
        data = []
        for name in snap.models_for(key):
            model = snap.models.get(name)
            owner = model.provider if model else "alias"
            data.append({"id": name, "object": "model", "created": 0, "owned_by": owner})
        await _respond(send, 200, orjson.dumps({"object": "list", "data": data}))

    # -- chat ------------------------------------------------------------------------
    async def _chat(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        call = _Call(request_id=new_request_id(), started=time.perf_counter(), created_at=time.time())
        sent = _SendTracker(send)
        try:
            await self._chat_inner(call, scope, receive, sent)
        except _ClientGone:
            call.status, call.error_kind = 499, "client_disconnected"
        except _Reject as exc:
            call.status = exc.status
            call.error_kind = exc.code or "rejected"
            self._log(call)
            await _respond(
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
                await _respond(
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

    async def _chat_inner(self, call: _Call, scope: dict[str, Any], receive: Any, send: Any) -> None:
        snap = self.config.current
        if snap is None:
            raise _Reject(
                503,
                "The gateway has not loaded its configuration yet; retry shortly.",
                kind="server_error",
                code="not_ready",
            )
        call.key = self._authenticate(scope, snap)
        call.raw = await self._read_body(call, scope, receive)
        payload, odd_numbers = await self._parse(call.raw)
        model = payload.get("model")
        if not isinstance(model, str) or not model.strip():
            raise _Reject(400, "Missing required parameter: 'model'.", code="missing_model", param="model")
        if len(model) > MAX_MODEL_NAME or not _PRINTABLE.fullmatch(model):
            raise _Reject(
                400,
                f"Invalid 'model': at most {MAX_MODEL_NAME} printable characters.",
                code="invalid_model",
                param="model",
            )
        messages = payload.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _Reject(
                400,
                "Missing required parameter: 'messages' (a non-empty list).",
                code="missing_messages",
                param="messages",
            )
        call.requested_model = model
        call.stream = payload.get("stream") is True
        # Only the raw bytes travel on: the parsed body (several times their size) goes before the upstream call.
        del payload, messages
        route = snap.resolve(call.key, model)
        if isinstance(route, Refusal):
            raise _Reject(route.status, route.message, kind=route.kind, code=route.code, param="model")
        call.route = route
        if odd_numbers and _may_rename(route, model) and await self._wide_numbers(call.raw):
            raise _Reject(
                400,
                "The request body holds a number beyond 64-bit range or with a three-digit exponent; "
                "this route re-addresses the request to another model, which would change it.",
                code="number_out_of_range",
            )
        await self._proxy_watching_disconnect(call, snap, receive, send)

    async def _read_body(self, call: _Call, scope: dict[str, Any], receive: Any) -> bytes:
        declared = None
        for name, value in scope["headers"]:
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    raise _Reject(400, "Malformed Content-Length header.", code="invalid_request") from None
                if declared > self.max_body:
                    raise _Reject(413, _too_large(self.max_body), code="request_too_large")
                break
        if declared is None or declared > self.limits.large_body:
            # Room for the body (the limit when its length is not declared) before a byte of it is read:
            # a waiting body stays in the client's socket, not in this worker.
            try:
                call.budget = await self.body_budget.acquire(
                    self.max_body if declared is None else declared, self.body_wait
                )
            except TimeoutError:
                raise _Reject(
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
            raise _Reject(
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
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                raise _Reject(413, _too_large(self.max_body), code="request_too_large")
            chunks.append(chunk)
            if not message.get("more_body"):
                return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def _parse(self, raw: bytes) -> tuple[dict[str, Any], bool]:
        """parse_body; a large or many-valued body in a worker thread, one at a time (see _in_thread)."""
        try:
            if len(raw) <= THREAD_BYTES and raw.count(b",") <= THREAD_VALUES:
                return parse_body(raw, self.limits)
            return await self._in_thread(functools.partial(parse_body, raw, self.limits, slice_bytes=MIB))
        except BodyError as exc:
            raise _Reject(400, exc.message, code=exc.code, param=exc.param) from None

    async def _in_thread[T, *Ts](self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """Run `fn` in a worker thread, one at a time, so the event loop never waits on two (orjson holds the GIL)."""
        if self._parse_lock is None:
            self._parse_lock = asyncio.Lock()
        async with self._parse_lock:
            return await asyncio.to_thread(fn, *args)

    def _release_body(self, call: _Call) -> None:
        """The body is gone (written upstream or refused): drop it and give its room back."""
        call.raw = b""
        if call.budget:
            self.body_budget.release(call.budget)
            call.budget = 0

    async def _proxy_watching_disconnect(self, call: _Call, snap: Snapshot, receive: Any, send: Any) -> None:
        """Run the upstream work in this task; if the client disconnects first, cancel it (the upstream call too)."""
        task = asyncio.current_task()
        assert task is not None
        state = {"done": False, "gone": False}

        async def watch() -> None:
            await _wait_disconnect(receive)
            # Same event loop: this runs only while the work is suspended, so `done` is exact.
            if not state["done"]:
                state["gone"] = True
                task.cancel()

        watcher = asyncio.ensure_future(watch())
        try:
            await self._proxy(call, snap, send)
        except asyncio.CancelledError:
            if state["gone"]:
                task.uncancel()
                raise _ClientGone from None
            raise  # our own cancellation (shutdown): let it through
        finally:
            state["done"] = True
            watcher.cancel()

    def _callable(self, snap: Snapshot, target: Target) -> bool:
        provider = snap.providers.get(target.provider)
        # A provider whose stored key cannot be decrypted is skipped like an unknown protocol: the chain
        # serves, and its circuit is never consulted (a configuration fault is not the provider being down).
        return provider is not None and provider.protocol in ADAPTERS and not provider.credential_unavailable

    async def _proxy(self, call: _Call, snap: Snapshot, send: Any) -> None:
        """Fallback: closed target -> it; open -> first available chain entry; none -> primary anyway."""
        assert call.route is not None
        route = call.route
        engine = self.engine
        primary_ok = self._callable(snap, route.primary)
        decision = engine.allow(route.primary.provider, route.primary.model) if primary_ok else None
        if decision is not None and decision.allowed:
            await self._attempt(call, snap, send, route.primary, decision, step=0)
            return
        if route.chain is not None:
            for step, entry in enumerate(route.chain.entries, start=1):
                # An entry this gateway cannot call is skipped before it could take a probe slot.
                if not self._callable(snap, entry):
                    continue
                entry_decision = engine.allow(entry.provider, entry.model)
                if entry_decision.allowed:
                    await self._attempt(call, snap, send, entry, entry_decision, step=step)
                    return
        if not primary_ok:
            provider = snap.providers.get(route.primary.provider)
            if provider is not None and provider.credential_unavailable:
                message = credential_unavailable_message(provider.name)
                raise _Reject(502, message, kind="upstream_error", code="credential_unavailable")
            message = (
                f"Provider `{route.primary.provider}` is not configured."
                if provider is None
                else f"Provider `{provider.name}` speaks `{provider.protocol}`, which this gateway cannot call yet."
            )
            raise _Reject(502, message, kind="server_error", code="no_route")
        # An operator's hold (forced open, or the provider drained) means no traffic at all: never the
        # optimistic attempt. Asked only here, once every entry has been refused.
        if engine.hold(route.primary.provider, route.primary.model) is not None:
            raise _Reject(
                503,
                f"`{route.primary.provider} / {route.primary.model}` is held open by an operator and no "
                "fallback entry is available; retry later.",
                kind="server_error",
                code="circuit_held",
            )
        # Every entry unavailable (or no chain): try the original target anyway ("optimistic primary").
        call.optimistic = True
        await self._attempt(call, snap, send, route.primary, None, step=0)

    async def _attempt(
        self, call: _Call, snap: Snapshot, send: Any, target: Target, decision: Decision | None, *, step: int
    ) -> None:
        """Call one target. Reports exactly one outcome for `decision`, before the response's last bytes."""
        reported = False

        def report(outcome: Outcome) -> None:
            nonlocal reported
            if not reported:
                reported = True
                self._report_outcome(decision, outcome)

        try:
            await self._attempt_inner(call, snap, send, target, report, step=step)
        except asyncio.CancelledError:
            report(Outcome.cancelled())
            raise
        finally:
            # Anything unexpected still reports (as a connection error) so no probe slot is held.
            report(Outcome.connection_error())

    async def _attempt_inner(
        self, call: _Call, snap: Snapshot, send: Any, target: Target, report: Any, *, step: int
    ) -> None:
        assert call.route is not None
        call.served, call.chain_step = target, step
        call.fallback = step > 0
        headers = self._attribution(call, target)
        provider = snap.providers[target.provider]
        adapter = self._adapter(provider)
        # Exactly what was validated goes upstream, in one copy: the raw bytes (no key repeats, so they say
        # what the parsed object said) unless the model changes, then the body parsed again and re-serialised.
        if target.model != call.requested_model:
            call.raw = await self._renamed(call.raw, target.model)
        # The transport holds the only reference from here and drops it once the bytes are written.
        body = RequestBody(call.raw, on_sent=lambda: self._release_body(call))
        call.raw = b""
        attempt: dict[str, Any] = {
            "provider": target.provider,
            "model": target.model,
            "status": None,
            "error": None,
            "duration_ms": 0.0,
        }
        call.attempts.append(attempt)
        t0 = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + self.deadline
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    response = await adapter.chat(body, stream=call.stream)
                finally:
                    body.sent()  # the upstream has the request (or never will): its bytes can go
        except (UpstreamError, TimeoutError) as exc:
            kind = exc.kind if isinstance(exc, UpstreamError) else "timeout"
            message = exc.message if isinstance(exc, UpstreamError) else "The upstream exceeded the deadline."
            attempt["error"], attempt["duration_ms"] = kind, _ms(t0)
            status = 504 if kind == "timeout" else 502
            call.status, call.error_kind = status, kind
            report(_outcome_of(kind))
            self._log(call)
            await _respond(send, status, openai_error(message, kind="upstream_error", code=kind), extra=headers)
            return
        except asyncio.CancelledError:
            attempt["error"], attempt["duration_ms"] = "cancelled", _ms(t0)
            raise
        attempt["status"] = response.status
        if response.stream is None:
            attempt["duration_ms"] = _ms(t0)
            call.status = response.status
            call.ttfb = (time.perf_counter() - call.started) * 1000
            if response.status == 200:
                self._usage_from_body(call, response.body)
            else:
                call.error_kind = "upstream_status"
            report(Outcome.of_status(response.status))
            self._log(call)
            await _respond(send, response.status, response.body, headers=response.headers, extra=headers)
            return
        await self._relay_stream(call, send, response, headers, attempt, t0, deadline, report)

    async def _wide_numbers(self, raw: bytes) -> bool:
        if len(raw) <= THREAD_BYTES:
            return wide_numbers(raw)
        return await self._in_thread(wide_numbers, raw)

    async def _renamed(self, raw: bytes, model: str) -> bytes:
        def rename() -> bytes:
            payload = orjson.loads(raw)
            payload["model"] = model
            return orjson.dumps(payload)

        if len(raw) <= THREAD_BYTES and raw.count(b",") <= THREAD_VALUES:
            return rename()
        return await self._in_thread(rename)

    async def _relay_stream(
        self,
        call: _Call,
        send: Any,
        response: UpstreamResponse,
        headers: list[tuple[bytes, bytes]],
        attempt: dict[str, Any],
        t0: float,
        deadline: float,
        report: Any,
    ) -> None:
        """Pass SSE chunks through as they arrive; committed after the first one."""
        assert response.stream is not None
        started = False
        tail = b""
        pending = b""  # an incomplete SSE line that may carry usage
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in response.stream:
                    if not chunk:
                        continue
                    if not started:
                        await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *headers]})
                        call.status = 200
                        call.ttfb = (time.perf_counter() - call.started) * 1000
                        started = True
                    if pending or b'"usage"' in chunk:
                        pending = self._usage_from_sse(call, pending + chunk)
                    tail = (tail + chunk)[-64:]
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except (UpstreamError, TimeoutError) as exc:
            kind = exc.kind if isinstance(exc, UpstreamError) else "timeout"
            message = exc.message if isinstance(exc, UpstreamError) else "the upstream exceeded the deadline"
            attempt["error"], attempt["duration_ms"] = kind, _ms(t0)
            report(Outcome.timeout() if kind == "timeout" else Outcome.connection_error())
            if not started:
                # Nothing was committed yet: answer with a plain error status.
                status = 504 if kind == "timeout" else 502
                call.status, call.error_kind = status, kind
                self._log(call)
                await _respond(send, status, openai_error(message, kind="upstream_error", code=kind), extra=headers)
                return
            call.error_kind = "stream_interrupted"
            self._log(call)
            # End with an error event and never [DONE], so a truncated answer never looks complete.
            await send(
                {
                    "type": "http.response.body",
                    "more_body": False,
                    "body": sse_error(f"The upstream stream was interrupted: {message}", code="stream_interrupted"),
                }
            )
            return
        except asyncio.CancelledError:
            attempt["error"], attempt["duration_ms"] = "cancelled", _ms(t0)
            raise
        attempt["duration_ms"] = _ms(t0)
        report(Outcome.of_status(200))
        if not started:
            await send({"type": "http.response.start", "status": 200, "headers": [*_SSE_HEADERS, *headers]})
            call.status = 200
        self._log(call)
        # An upstream that ended cleanly without [DONE] is finished cleanly for the client.
        if _DONE in tail:
            closing = b""
        else:
            closing = (b"" if not tail or tail.endswith(b"\n\n") else b"\n\n") + b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": closing, "more_body": False})

    # -- helpers ---------------------------------------------------------------------
    def _attribution(self, call: _Call, target: Target) -> list[tuple[bytes, bytes]]:
        assert call.route is not None
        headers = [(b"x-vidai-model", target.model.encode()), (b"x-vidai-request-id", call.request_id.encode())]
        if call.requested_model != target.model:
            headers.append((b"x-vidai-requested-model", call.requested_model.encode()))
        if call.fallback:
            headers.append((b"x-vidai-fallback", b"true"))
            headers.append((b"x-vidai-fallback-from", call.route.primary.provider.encode()))
        return headers

    def _report_outcome(self, decision: Decision | None, outcome: Outcome) -> None:
        """Tell the breaker how the call it allowed went (no decision: the circuit was not consulted)."""
        if decision is not None:
            self.engine.record(decision, outcome)

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

    def _usage_from_body(self, call: _Call, body: bytes) -> None:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return
        if isinstance(data, dict):
            _take_usage(call, data.get("usage"))

    def _usage_from_sse(self, call: _Call, data: bytes) -> bytes:
        """Read usage from complete `data:` lines; return an incomplete last line to carry over."""
        lines = data.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line.startswith(b"data: {") and b'"usage"' in line:
                try:
                    event = orjson.loads(line[6:])
                except orjson.JSONDecodeError:
                    continue
                if isinstance(event, dict):
                    _take_usage(call, event.get("usage"))
        # Only a line that may still turn out to carry usage is kept, and never more than 64 KiB.
        return rest if rest.startswith(b"data: {") and len(rest) < 65536 else b""

    def _log(self, call: _Call) -> None:
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

    def _log_record(self, call: _Call) -> dict[str, Any]:
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


def _take_usage(call: _Call, usage: Any) -> None:
    """Token counts only when they are what they claim: non-negative integers of sane size."""
    if not isinstance(usage, dict):
        return
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if _count(tokens_in):
        call.tokens_in = tokens_in
    if _count(tokens_out):
        call.tokens_out = tokens_out


def _count(value: Any) -> bool:
    return type(value) is int and 0 <= value < 2**31


class _SendTracker:
    """Wraps ASGI send to know whether a response started and finished (for last-resort errors)."""

    __slots__ = ("finished", "send", "started")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.started = False
        self.finished = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
        elif not message.get("more_body", False):
            self.finished = True
        await self.send(message)


def _outcome_of(kind: str) -> Outcome:
    """The breaker outcome of a call that produced no response. `credential_unavailable` (nothing was sent:
    the stored key cannot be decrypted) is a configuration fault, not the provider failing: it is reported
    as cancelled, which the breaker ignores and which still frees a probe slot."""
    if kind == "timeout":
        return Outcome.timeout()
    if kind == "credential_unavailable":
        return Outcome.cancelled()
    return Outcome.connection_error()


def _may_rename(route: Route, model: str) -> bool:
    """Whether a call on this route may name another model upstream than the client did (alias or fallback)."""
    if route.primary.model != model:
        return True
    return route.chain is not None and any(entry.model != model for entry in route.chain.entries)


def _too_large(limit: int) -> str:
    return f"The request body is larger than the gateway's limit of {limit // (1024 * 1024)} MiB."


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


async def _wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def _respond(
    send: Any,
    status: int,
    body: bytes,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    base = headers if headers else _JSON_HEADERS
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*base, *(extra or ()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
    )
