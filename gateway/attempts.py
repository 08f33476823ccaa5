"""The attempt loop: which target a chat request calls, calling it, and relaying its answer.

`AttemptLoop.run` asks the planner (gateway.resilience.next_action, pure) what to call; with the chain's
resilience policy off that is one call, chosen by the default rule (the primary if its circuit allows,
else the first chain entry whose circuit does, else the primary anyway), exactly as before the policy
existed. With the policy on, each failed attempt goes back to the planner, which retries the same target,
moves to the next entry, continues a broken stream on an entry that supports assistant prefill, or gives
up; docs/resilience.md has the rules and a timeline per failure kind.

Every call `allow()` let through reports exactly one outcome to the breaker, before the response's last
bytes; the request's log record is handed over once, also before them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson

from core.crypto import credential_unavailable_message
from gateway.errors import openai_error, sse_error
from gateway.exchange import SSE_HEADERS, Exchange, Reject, ms, respond
from gateway.resilience import (
    NOT_RETRYABLE,
    TIMEOUT_KINDS,
    Attempt,
    Call,
    Candidate,
    Continue,
    FailureClass,
    GiveUp,
    GiveUpReason,
    ResiliencePolicy,
    classify,
    next_action,
    retry_after,
)
from gateway.snapshot import ProviderInfo, Route, Snapshot, Target
from gateway.translate import TranslationError
from gateway.upstream.anthropic import MAX_EVENT_BYTES, AnthropicAdapter
from gateway.upstream.base import Adapter, UpstreamError, UpstreamResponse
from gateway.upstream.openai import AzureAdapter, OpenAIAdapter
from gateway.upstream.transport import RequestBody
from health.breaker.base import BreakerEngine
from health.breaker.types import Decision, Outcome

ADAPTERS: dict[str, type[Adapter]] = {"openai": OpenAIAdapter, "anthropic": AnthropicAdapter, "azure": AzureAdapter}
PREFILL = "assistant_prefill"  # the catalog capability a continuation needs
_OFF = ResiliencePolicy()
_CLOSE = b"data: [DONE]\n\n"
# A finish reason in a chunk of a passed-through stream (the default path does not parse its events).
_FINISHED = re.compile(rb'"finish_reason"\s*:\s*"')
# The longest unfinished line the default path carries to the next chunk to read it whole; a longer one passes
# through unread (no event this gateway reads from a stream is near it).
_CARRY_MAX = 64 * 1024
# How an SSE body may begin: an event's field, a comment (a keep-alive), or a blank line. The default path commits
# its 200 on such a first chunk and holds anything else (a whole JSON answer is no stream).
_SSE_START = (b"data:", b":", b"event:", b"id:", b"retry:", b"\n", b"\r")
_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\n", b"\r")  # SSE allows CRLF, LF and a lone CR
_ONE_ATTEMPT = (b"x-vidai-attempts", b"1")
# The client's status for a call that got no response, by the transport's kind (else 502).
_STATUS_OF_KIND = {"timeout": 504, "pool_full": 503}
_NOT_RETRYABLE_STATUS = 400  # what the breaker is told of an error event it must not count
# The error events the breaker must not count: the client's request, not the provider failing (an over-long
# prompt is never retried on the same target either, and is as neutral as its plain 400).
_NEUTRAL = NOT_RETRYABLE | {FailureClass.CONTEXT_LENGTH}
# How long a stream's body may go on after its [DONE] (policy on) before the client's stream ends without it.
AFTER_DONE_SECONDS = 1.0


class _Report:
    """Reports one call's outcome to the breaker, once: later reports (a catch-all in `finally`) are no-ops.
    No decision (the optimistic primary, whose circuit was not consulted): nothing to report."""

    __slots__ = ("decision", "engine")

    def __init__(self, engine: BreakerEngine, decision: Decision | None) -> None:
        self.engine, self.decision = engine, decision

    def __call__(self, outcome: Outcome) -> None:
        decision, self.decision = self.decision, None
        if decision is not None:
            self.engine.record(decision, outcome)


class _Circuit:
    """A candidate's `allows`: asks the engine and keeps the decision, to report the call's outcome."""

    __slots__ = ("decision", "engine", "model", "provider")

    def __init__(self, engine: BreakerEngine, provider: str, model: str) -> None:
        self.engine, self.provider, self.model = engine, provider, model
        self.decision: Decision | None = None

    def __call__(self) -> bool:
        self.decision = self.engine.allow(self.provider, self.model)
        return self.decision.allowed


@dataclass(slots=True)
class _Failure:
    """One failed attempt as the client may be told of it (the planner's Attempt plus what it needs)."""

    attempt: Attempt
    kind: str  # the log's error: upstream_status, timeout, connect_timeout, first_token_timeout, ...
    message: str
    response: UpstreamResponse | None = None  # an error response, returned unchanged on giving up
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)  # its attribution headers
    event: dict[str, Any] | None = None  # an error event the stream sent instead, relayed as it came on giving up


@dataclass(slots=True)
class _Progress:
    """What one attempt's stream has done so far."""

    content: bool = False  # an event carrying part of the answer arrived (the first token)
    malformed: int = 0  # `data:` lines that were not JSON objects, dropped
    held: list[bytes] = field(default_factory=list)  # events before the first token, sent with it
    error: dict[str, Any] | None = None  # the error event that ended the stream
    sending: bool = False  # waiting for the client to take what was relayed


@dataclass(slots=True)
class _Seen:
    """What the default path reads from the stream it passes through unchanged."""

    finished: bool = False  # a finish reason went by, in an event
    done: bool = False  # a `data: [DONE]` line went by (the text inside an event's content is no end)
    error_event: dict[str, Any] | None = None  # the upstream's own error event, relayed as it came

    def scan(self, call: Exchange, lines: bytes) -> None:
        """Read usage, a finish reason, [DONE] and an error event from whole `lines` (a line a chunk cut is read
        once the rest of it has come). Only `data:` lines count."""
        if b'"usage"' in lines:
            _usage_from_sse(call, lines)
        if not self.finished and b"finish_reason" in lines:
            self.finished = _finish_in_event(lines)
        if not self.done and b"[DONE]" in lines:
            self.done = _done_line(lines)
        if b'"error"' in lines:
            self.error_event = _error_event(lines) or self.error_event


@dataclass(slots=True)
class _Stream:
    """What the client has received of a stream so far (resilient path)."""

    committed: bool = False  # response headers and at least one event sent
    ident: Any = None  # the first part's `id`: a continuation's events carry it too
    text: list[str] = field(default_factory=list)  # content delivered, for the prefill
    tool_calls: bool = False  # a tool call was (partly) delivered: no prefill can continue it
    finished: bool = False  # a finish reason was relayed
    done: bool = False  # the upstream sent [DONE]
    usage: list[dict[str, int]] = field(default_factory=list)  # usage of each part that reported one


class AttemptLoop:
    """The attempt loop of one gateway process. Its collaborators are GatewayApp's: passed in, not imported."""

    def __init__(
        self,
        *,
        engine: Callable[[], BreakerEngine],
        adapter: Callable[[ProviderInfo], Adapter],
        renamed_now: Callable[[bytes, str], bytes | None],
        renamed_in_thread: Callable[[bytes, str], Awaitable[bytes]],
        release_body: Callable[[Exchange], None],
        log: Callable[[Exchange], None],
        deadline_seconds: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._engine = engine
        self._adapter = adapter
        # The body renamed for another model: at once when it is small (None otherwise), else in a worker thread.
        self._renamed_now = renamed_now
        self._renamed_in_thread = renamed_in_thread
        self._release_body = release_body
        self._log = log
        self.deadline = deadline_seconds
        # The planner's time (backoff, Retry-After, the policy deadline): injectable, with `sleep`, for tests.
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()
        # Candidates per (primary, chain) for the current snapshot and engine (see _plan).
        self._plans_for: tuple[Snapshot | None, BreakerEngine | None] = (None, None)
        self._plans: dict[tuple[Target, int | None], tuple[bool, list[Candidate]]] = {}

    # -- choosing ------------------------------------------------------------------------------------------
    async def run(self, call: Exchange, snap: Snapshot, send: Any) -> None:
        """Answer `call`: the default rule's one call, or the resilience policy's attempts."""
        assert call.route is not None
        route = call.route
        engine = self._engine()
        policy = route.chain.resilience if route.chain is not None else _OFF
        primary_ok, candidates = self._plan(snap, route, engine)
        started = self.clock()
        action = next_action(
            candidates=candidates, policy=policy, attempts=(), now=started, started=started, rng=self.rng
        )
        if isinstance(action, GiveUp) or (isinstance(action, Call) and action.optimistic):
            # Nothing allows a call: the primary anyway ("optimistic primary"), unless it cannot be called
            # or an operator holds it.
            self._refuse_unless_optimistic(snap, call, engine, primary_ok)
            call.optimistic = True
            decision = None
            target = candidates[0]
        else:
            assert isinstance(action, Call)
            target = action.target
            decision = _decision(target)
        if not policy.enabled:
            await self._single(call, snap, send, target, decision)
            return
        await self._resilient(call, snap, send, candidates, policy, target, decision, started)

    def _plan(self, snap: Snapshot, route: Route, engine: BreakerEngine) -> tuple[bool, list[Candidate]]:
        """The route's candidates, built once per snapshot and engine. Sharing them between concurrent
        requests is safe: a `_Circuit` keeps the decision of its last `allows()`, and every caller reads it
        right after asking, with no await in between (one event loop)."""
        if snap is not self._plans_for[0] or engine is not self._plans_for[1]:
            self._plans_for = (snap, engine)
            self._plans = {}
        key = (route.primary, route.chain.id if route.chain is not None else None)
        plan = self._plans.get(key)
        if plan is None:
            primary_ok = _callable(snap, route.primary)
            entries = route.chain.entries if route.chain is not None else ()
            plan = (primary_ok, _candidates(snap, route.primary, entries, primary_ok, engine))
            if len(self._plans) < 10_000:
                self._plans[key] = plan
        return plan

    def _refuse_unless_optimistic(
        self, snap: Snapshot, call: Exchange, engine: BreakerEngine, primary_ok: bool
    ) -> None:
        assert call.route is not None
        primary = call.route.primary
        if not primary_ok:
            provider = snap.providers.get(primary.provider)
            if provider is not None and provider.credential_unavailable:
                message = credential_unavailable_message(provider.name)
                raise Reject(502, message, kind="upstream_error", code="credential_unavailable")
            message = (
                f"Provider `{primary.provider}` is not configured."
                if provider is None
                else f"Provider `{provider.name}` speaks `{provider.protocol}`, which this gateway cannot call yet."
            )
            raise Reject(502, message, kind="server_error", code="no_route")
        # An operator's hold (forced open, or the provider drained) means no traffic at all: never the
        # optimistic attempt. Asked only here, once every entry has been refused.
        if engine.hold(primary.provider, primary.model) is not None:
            raise Reject(
                503,
                f"`{primary.provider} / {primary.model}` is held open by an operator and no "
                "fallback entry is available; retry later.",
                kind="server_error",
                code="circuit_held",
            )

    # -- the default path: one call ------------------------------------------------------------------------
    async def _single(
        self, call: Exchange, snap: Snapshot, send: Any, target: Candidate, decision: Decision | None
    ) -> None:
        """Call one target. Reports exactly one outcome for `decision`, before the response's last bytes."""
        report = _Report(self._engine(), decision)

        try:
            await self._single_inner(call, snap, send, target, report)
        except asyncio.CancelledError:
            report(Outcome.cancelled())
            raise
        finally:
            # Anything unexpected still reports (as a connection error) so no probe slot is held.
            report(Outcome.connection_error())

    async def _single_inner(
        self, call: Exchange, snap: Snapshot, send: Any, target: Candidate, report: Callable[[Outcome], None]
    ) -> None:
        served = Target(target.provider, target.model)
        _serve(call, served, target.step)
        headers = [*_attribution(call, served), _ONE_ATTEMPT]
        adapter = self._adapter(snap.providers[target.provider])
        # Exactly what was validated goes upstream, in one copy: the raw bytes (no key repeats, so they say
        # what the parsed object said) unless the model changes, then the body parsed again and re-serialised.
        if target.model != call.requested_model:
            call.raw = self._renamed_now(call.raw, target.model) or await self._renamed_in_thread(
                call.raw, target.model
            )
        # The transport holds the only reference from here and drops it once the bytes are written.
        body = RequestBody(call.raw, on_sent=lambda: self._release_body(call))
        call.raw = b""
        attempt = _attempt_record(call, served)
        t0 = time.perf_counter()
        deadline = asyncio.get_running_loop().time() + self.deadline
        try:
            async with asyncio.timeout_at(deadline):
                try:
                    response = await adapter.chat(
                        body, stream=call.stream, model=target.model, max_tokens_default=_max_tokens(snap, target)
                    )
                finally:
                    body.sent()  # the upstream has the request (or never will): its bytes can go
                if response.stream is None and response.status == 200:
                    _take_answer(call, response.body, target.provider)
        except TranslationError as exc:
            # Nothing was sent: the client's request names something this target's protocol cannot carry.
            attempt["error"], attempt["duration_ms"] = "untranslatable", ms(t0)
            report(Outcome.cancelled())
            call.status, call.error_kind = 400, "untranslatable"
            self._log(call)
            await respond(send, 400, _untranslatable(exc, target), extra=headers)
            return
        except (UpstreamError, TimeoutError) as exc:
            kind = exc.kind if isinstance(exc, UpstreamError) else "timeout"
            message = exc.message if isinstance(exc, UpstreamError) else "The upstream exceeded the deadline."
            attempt["error"], attempt["duration_ms"] = kind, ms(t0)
            status = _STATUS_OF_KIND.get(kind, 502)
            call.status, call.error_kind = status, kind
            report(_outcome_of(kind))
            self._log(call)
            await respond(send, status, openai_error(message, kind="upstream_error", code=kind), extra=headers)
            return
        except asyncio.CancelledError:
            attempt["error"], attempt["duration_ms"] = "cancelled", ms(t0)
            raise
        attempt["status"] = response.status
        if response.stream is None:
            attempt["duration_ms"] = ms(t0)
            call.status = response.status
            call.ttfb = (time.perf_counter() - call.started) * 1000
            if response.status != 200:
                call.error_kind = "upstream_status"
            report(Outcome.of_status(response.status))
            self._log(call)
            await respond(send, response.status, response.body, headers=response.headers, extra=headers)
            return
        await self._relay_stream(call, send, response, headers, attempt, t0, deadline, report)

    async def _relay_stream(
        self,
        call: Exchange,
        send: Any,
        response: UpstreamResponse,
        headers: list[tuple[bytes, bytes]],
        attempt: dict[str, Any],
        t0: float,
        deadline: float,
        report: Callable[[Outcome], None],
    ) -> None:
        """Pass SSE chunks through as they arrive; committed once an event (a `data:` line) has begun. What
        comes before it (comments, blank lines) is held and sent with it; a body with no event at all (a whole
        JSON answer to a stream request, say) is no answer."""
        assert response.stream is not None
        started = False
        seen = _Seen()
        # The last two chunks relayed (references, never copied): whether the body ended at an event's end.
        last = before = b""
        # The start of a line the last chunk cut (at most 64 KiB), read with the rest of it: an upstream's
        # chunks need not end where its lines do.
        pending = b""
        held = b""  # the bytes before the first event (at most 64 KiB), not yet committed
        sending = False  # the deadline passing while the client reads is not the provider's fault
        try:
            async with asyncio.timeout_at(deadline):
                async for chunk in response.stream:
                    if not chunk:
                        continue
                    if not started:
                        if held:
                            chunk = held + chunk
                        if chunk.startswith(_BOM):
                            chunk = chunk[3:]  # an SSE reader ignores it; so does every line check below
                        if not chunk.startswith(_SSE_START):
                            # Not (yet) SSE: a JSON body, say, or a first chunk cut inside `data:`.
                            held = chunk
                            if len(held) > _CARRY_MAX:
                                break  # far more than any line start, and still nothing of SSE: not a stream
                            continue
                        held = b""
                        await send({"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *headers]})
                        call.status = 200
                        call.ttfb = (time.perf_counter() - call.started) * 1000
                        started = True
                    lines = pending + chunk if pending else chunk
                    if chunk.endswith(_LINE_ENDS):
                        pending = b""
                    else:
                        cut = max(lines.rfind(b"\n"), lines.rfind(b"\r")) + 1
                        lines, pending = lines[:cut], lines[cut:]
                        if len(pending) > _CARRY_MAX:
                            pending = b""  # longer than any event this gateway reads: passed through unread
                    seen.scan(call, lines)
                    before, last = last, chunk
                    sending = True
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                    sending = False
            if pending:
                seen.scan(call, pending)  # a last line the upstream did not end
        except (UpstreamError, TimeoutError) as exc:
            if started and pending and not seen.done:
                seen.done = _done_line(pending)  # a `data: [DONE]` the cut left without its line end
            if not (started and (seen.done or seen.finished)):
                kind = exc.kind if isinstance(exc, UpstreamError) else "timeout"
                message = exc.message if isinstance(exc, UpstreamError) else "the upstream exceeded the deadline"
                attempt["error"], attempt["duration_ms"] = kind, ms(t0)
                if sending:
                    report(Outcome.cancelled())  # the client, not the provider, held the stream past its deadline
                else:
                    report(Outcome.timeout() if kind == "timeout" else Outcome.connection_error())
                if not started:
                    # Nothing was committed yet: answer with a plain error status.
                    status = _STATUS_OF_KIND.get(kind, 502)
                    call.status, call.error_kind = status, kind
                    self._log(call)
                    await respond(send, status, openai_error(message, kind="upstream_error", code=kind), extra=headers)
                    return
                await self._end_interrupted(call, send, f"The upstream stream was interrupted: {message}")
                return
            # Else cut, or held open until a timeout, after the answer's finish reason or [DONE] went by: the
            # answer is whole, and ends as one below.
        except asyncio.CancelledError:
            attempt["error"], attempt["duration_ms"] = "cancelled", ms(t0)
            raise
        attempt["duration_ms"] = ms(t0)
        if not started:
            # A 200 whose stream ended before any event (or sent 64 KiB without one): no answer at all, and nothing
            # committed yet.
            await _close(response.stream)
            attempt["error"] = "stream_incomplete"
            report(Outcome.connection_error())
            call.status, call.error_kind = 502, "stream_incomplete"
            self._log(call)
            message = "The upstream ended the stream without sending an answer."
            await respond(
                send, 502, openai_error(message, kind="upstream_error", code="stream_incomplete"), extra=headers
            )
            return
        complete = seen.done or seen.finished
        if not complete and seen.error_event is not None:
            # The upstream ended its stream with an error event, which the client already has: nothing to add.
            # A class that is never retried (a content filter) does not count against the provider.
            attempt["error"] = "error_event"
            report(_outcome_of("error_event", classify(None, None, seen.error_event)))
            call.error_kind = "error_event"
            self._log(call)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if not complete:
            # Ended cleanly but without a finish reason or [DONE]: a truncated answer, never made to look whole.
            attempt["error"] = "stream_incomplete"
            report(Outcome.connection_error())
            await self._end_interrupted(
                call, send, "The upstream ended the stream before its answer was complete.", code="stream_incomplete"
            )
            return
        report(Outcome.of_status(200))
        self._log(call)
        # An upstream whose answer finished but that did not send [DONE] is finished cleanly for the client.
        if seen.done:
            closing = b""
        else:
            ended = (last if len(last) > 1 else before[-1:] + last).endswith(b"\n\n")
            closing = (b"" if ended else b"\n\n") + _CLOSE
        await send({"type": "http.response.body", "body": closing, "more_body": False})

    async def _end_interrupted(
        self, call: Exchange, send: Any, message: str, *, code: str = "stream_interrupted"
    ) -> None:
        """End a committed stream with an error event and never [DONE], so it never looks complete."""
        call.error_kind = code
        self._log(call)
        await send({"type": "http.response.body", "more_body": False, "body": sse_error(message, code=code)})

    # -- the resilience policy -------------------------------------------------------------------------------
    async def _resilient(
        self,
        call: Exchange,
        snap: Snapshot,
        send: Any,
        candidates: list[Candidate],
        policy: ResiliencePolicy,
        target: Candidate,
        decision: Decision | None,
        started: float,
    ) -> None:
        """Attempts until one answers or the planner gives up. The body stays in memory until the end."""
        original = call.raw
        call.raw = b""
        if self.deadline < policy.deadline_seconds:
            # The gateway's own deadline is the shorter: the planner must know it too, or it schedules a wait (a
            # backoff, a Retry-After) whose attempt would start after it.
            policy = dataclasses.replace(policy, deadline_seconds=self.deadline)
        loop_deadline = asyncio.get_running_loop().time() + policy.deadline_seconds
        stream = _Stream() if call.stream else None
        failures: list[_Failure] = []
        action: Call | Continue | GiveUp = Call(target, started)
        try:
            while True:
                if isinstance(action, GiveUp):
                    await self._give_up(call, send, action, failures, stream)
                    return
                target = action.target
                if isinstance(action, Call):
                    wait = action.not_before - self.clock()
                    if wait > 0:
                        try:
                            await self.sleep(wait)
                        except asyncio.CancelledError:
                            # The client left during the backoff: the circuit's grant (maybe its probe) is unused.
                            if decision is not None:
                                self._engine().record(decision, Outcome.cancelled())
                            raise
                failure = await self._try(call, snap, send, target, decision, policy, original, stream, loop_deadline)
                if failure is None:
                    return
                failures.append(failure)
                action = next_action(
                    candidates=candidates,
                    policy=policy,
                    attempts=[f.attempt for f in failures],
                    now=self.clock(),
                    started=started,
                    rng=self.rng,
                )
                if isinstance(action, Continue) and stream is not None and not _can_continue(stream, original):
                    # The planner asked the circuit (it may have granted the probe): free it, uncalled.
                    held = _decision(action.target)
                    if held is not None:
                        self._engine().record(held, Outcome.cancelled())
                    broke = next(f.attempt for f in failures if f.attempt.delivered)
                    action = GiveUp(GiveUpReason.NO_CONTINUATION, broke)
                call.attempts[-1]["next"] = _next_label(action, failure)
                decision = _decision(action.target) if not isinstance(action, GiveUp) else None
        finally:
            self._release_body(call)

    async def _try(
        self,
        call: Exchange,
        snap: Snapshot,
        send: Any,
        target: Candidate,
        decision: Decision | None,
        policy: ResiliencePolicy,
        original: bytes,
        stream: _Stream | None,
        loop_deadline: float,
    ) -> _Failure | None:
        """One attempt: None when it answered the client, else its failure (nothing more sent, or the
        stream's delivered part, which the next attempt continues)."""
        report = _Report(self._engine(), decision)

        provider = snap.providers[target.provider]
        served = Target(target.provider, target.model)
        continuation = stream is not None and stream.committed
        # The log names the target that answered last (a continuation's, whose usage is nearly all of it).
        _serve(call, served, target.step)
        record = _attempt_record(call, served)
        if continuation:
            record["continuation"] = True
        at = self.clock()
        t0 = time.perf_counter()
        try:
            body = await self._body(call, original, target.model, stream if continuation else None)
            failure = await self._call(
                call,
                send,
                provider,
                served,
                target,
                body,
                policy,
                stream,
                loop_deadline,
                record,
                report,
                at,
                max_tokens=_max_tokens(snap, target),
            )
        except asyncio.CancelledError:
            record["error"], record["duration_ms"] = "cancelled", ms(t0)
            report(Outcome.cancelled())
            raise
        finally:
            report(Outcome.connection_error())
        if record["duration_ms"] == 0.0:
            record["duration_ms"] = ms(t0)
        if failure is not None:
            record["class"] = str(failure.attempt.failure)
        return failure

    async def _body(self, call: Exchange, original: bytes, model: str, stream: _Stream | None) -> bytes:
        """The request for this attempt: the client's, renamed to the target's model, and for a continuation
        the text delivered so far as a trailing assistant message."""
        if stream is None:
            if model == call.requested_model:
                return original
            return self._renamed_now(original, model) or await self._renamed_in_thread(original, model)
        payload = orjson.loads(original)
        payload["model"] = model
        text = "".join(stream.text)
        if text:
            payload["messages"] = [*payload["messages"], {"role": "assistant", "content": text}]
        return orjson.dumps(payload)

    async def _call(
        self,
        call: Exchange,
        send: Any,
        provider: ProviderInfo,
        served: Target,
        target: Candidate,
        body: bytes,
        policy: ResiliencePolicy,
        stream: _Stream | None,
        loop_deadline: float,
        record: dict[str, Any],
        report: Callable[[Outcome], None],
        at: float,
        *,
        max_tokens: int | None,
    ) -> _Failure | None:
        """Send the request and read the answer under the attempt's timeouts: connect (the provider's or
        the policy's, whichever is shorter), first token and stream idle (streams only: the provider's
        setting, else the policy's), and the request's deadline over everything."""
        adapter = self._adapter(provider)
        headers = _attribution(call, served)
        connect = min(provider.connect_timeout, policy.connect_timeout_seconds)
        first_token = provider.first_token_timeout or policy.first_token_timeout_seconds
        idle = provider.idle_timeout or policy.idle_timeout_seconds
        progress = _Progress()
        usage_before = len(stream.usage) if stream is not None else 0
        finished_before = stream is not None and (stream.done or stream.finished)
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        response: UpstreamResponse | None = None
        try:
            async with asyncio.timeout_at(loop_deadline):
                # A non-streamed answer arrives whole: its wait is the provider's read timeout and the deadline.
                async with asyncio.timeout(first_token if call.stream else None) as timer:
                    response = await adapter.chat(
                        body,
                        stream=call.stream,
                        connect_timeout=connect,
                        model=target.model,
                        max_tokens_default=max_tokens,
                    )
                    if response.stream is None and response.status == 200:
                        _take_answer(call, response.body, target.provider)
                    record["status"] = response.status
                    if response.stream is not None:
                        assert stream is not None
                        await self._relay(call, send, response.stream, headers, stream, timer, idle, progress)
        except TranslationError as exc:
            # Nothing was sent; an error the client must fix, returned like a provider's own 400.
            record["error"], record["duration_ms"] = "untranslatable", ms(t0)
            report(Outcome.cancelled())
            refusal = UpstreamResponse(400, [(b"content-type", b"application/json")], _untranslatable(exc, target))
            attempt = Attempt(target, FailureClass.INVALID_REQUEST, at, status=400)
            return _Failure(attempt, "untranslatable", str(exc), response=refusal, headers=headers)
        except UpstreamError as exc:
            if not _ended_after_answer(stream, finished_before):
                kind = "connect_timeout" if exc.connect_timeout else exc.kind
                return self._failed(record, report, target, at, kind, exc.message, headers, t0, stream, progress)
        except TimeoutError:
            if not _ended_after_answer(stream, finished_before):
                if loop.time() >= loop_deadline:
                    kind, message = "deadline", "The request's deadline passed."
                elif progress.content:
                    kind, message = "idle_timeout", f"{target.provider} sent nothing for {idle:g} s."
                else:
                    kind, message = "first_token_timeout", f"{target.provider} sent no token within {first_token:g} s."
                # A deadline that passed while the client was reading is not the provider's: not counted.
                blame = Outcome.cancelled() if progress.sending else None
                return self._failed(
                    record, report, target, at, kind, message, headers, t0, stream, progress, blame=blame
                )
        finally:
            if response is not None and response.stream is not None:
                await _close(response.stream)
        assert response is not None  # a fault before the response is never an answer that ended whole
        if response.stream is None:
            record["duration_ms"] = ms(t0)
            return await self._answered(call, send, response, headers, record, report, target, at, stream)
        assert stream is not None
        if progress.error is not None:
            message = _error_message(progress.error) or f"{target.provider} sent an error event."
            return self._failed(
                record, report, target, at, "error_event", message, headers, t0, stream, progress, body=progress.error
            )
        if not (stream.done or stream.finished):
            message = f"{target.provider} ended the stream before its answer was complete."
            return self._failed(record, report, target, at, "stream_incomplete", message, headers, t0, stream, progress)
        record["duration_ms"] = ms(t0)
        if progress.malformed:
            record["malformed_events"] = progress.malformed
        if len(stream.usage) > usage_before:
            record["usage"] = stream.usage[-1]  # this part's own; the request's tokens sum the parts
        report(Outcome.of_status(200))
        if not stream.committed:
            # A stream that ended with no content (only a role delta, or nothing): still a whole answer.
            await self._commit(call, send, headers, stream)
            if progress.held:
                await send({"type": "http.response.body", "body": b"".join(progress.held), "more_body": True})
        _sum_usage(call, stream)
        self._log(call)
        await send({"type": "http.response.body", "body": _CLOSE, "more_body": False})
        return None

    def _failed(
        self,
        record: dict[str, Any],
        report: Callable[[Outcome], None],
        target: Candidate,
        at: float,
        kind: str,
        message: str,
        headers: list[tuple[bytes, bytes]],
        t0: float,
        stream: _Stream | None,
        progress: _Progress,
        *,
        body: Any = None,
        blame: Outcome | None = None,
    ) -> _Failure:
        """A failure without a usable response: a transport error, a timeout, an error event, a cut. `blame`:
        the breaker's outcome when it is not the kind's own."""
        record["error"], record["duration_ms"] = kind, ms(t0)
        if progress.malformed:
            record["malformed_events"] = progress.malformed
        # An error event is classed by its body alone, as on the default path (one of no known type: server_error).
        failure = classify(None, None if body is not None else kind, body)
        report(blame or _outcome_of(kind, failure))
        delivered = stream is not None and stream.committed
        event = body if kind == "error_event" else None
        return _Failure(Attempt(target, failure, at, delivered=delivered), kind, message, headers=headers, event=event)

    async def _answered(
        self,
        call: Exchange,
        send: Any,
        response: UpstreamResponse,
        headers: list[tuple[bytes, bytes]],
        record: dict[str, Any],
        report: Callable[[Outcome], None],
        target: Candidate,
        at: float,
        stream: _Stream | None,
    ) -> _Failure | None:
        """A complete (non-streamed) response: 200 answers the client; an error status is a failure."""
        report(Outcome.of_status(response.status))
        if response.status == 200:
            call.status = 200
            call.ttfb = (time.perf_counter() - call.started) * 1000
            self._log(call)
            await respond(send, 200, response.body, headers=response.headers, extra=[*headers, _attempts(call)])
            return None
        record["error"] = "upstream_status"
        failure = classify(response.status, None, response.body)
        wait = retry_after(response.headers, time.time())
        delivered = stream is not None and stream.committed
        attempt = Attempt(target, failure, at, delivered=delivered, status=response.status, retry_after=wait)
        if wait is not None:
            record["retry_after"] = wait
        message = f"{target.provider} answered {response.status}."
        return _Failure(attempt, "upstream_status", message, response=response, headers=headers)

    async def _commit(self, call: Exchange, send: Any, headers: list[tuple[bytes, bytes]], stream: _Stream) -> None:
        call.status = 200
        call.ttfb = (time.perf_counter() - call.started) * 1000
        start = [*SSE_HEADERS, *headers, _attempts(call)]
        await send({"type": "http.response.start", "status": 200, "headers": start})
        stream.committed = True

    async def _relay(
        self,
        call: Exchange,
        send: Any,
        chunks: AsyncIterator[bytes],
        headers: list[tuple[bytes, bytes]],
        stream: _Stream,
        timer: asyncio.Timeout,
        idle: float,
        progress: _Progress,
    ) -> None:
        """Relay a stream event by event until it ends or sends an error event (kept in `progress`).
        Malformed events are dropped and counted; events before the first that carries an answer (a
        role-only delta) are held and sent with it, so a failure before it still moves on cleanly; from
        the first answer on, the first-token timer becomes the idle timer."""
        continuation = stream.committed
        loop = asyncio.get_running_loop()
        # A line longer than one chunk, piece by piece: joined once its end comes, never copied per chunk.
        pieces: list[bytes] = []
        size = 0
        upstream = aiter(chunks)
        ended = False
        while not ended:
            chunk = await anext(upstream, None)
            if chunk is None:
                if not pieces:
                    return
                # A last line the upstream did not end (its final event, or [DONE]) is read as if it had.
                chunk, ended = b"\n", True
            if b"\n" not in chunk:
                size += len(chunk)
                if size > MAX_EVENT_BYTES:
                    raise UpstreamError("connection_error", "The upstream sent an event larger than 1 MiB.")
                pieces.append(chunk)
                continue
            if pieces:
                pieces.append(chunk)
                chunk = b"".join(pieces)
                pieces.clear()
            lines = chunk.split(b"\n")
            rest = lines.pop()
            size = len(rest)
            if rest:
                if size > MAX_EVENT_BYTES:
                    raise UpstreamError("connection_error", "The upstream sent an event larger than 1 MiB.")
                pieces.append(rest)
            out: list[bytes] = []
            for raw_line in lines:
                line = raw_line.rstrip(b"\r")
                if not line.startswith(b"data:"):
                    continue  # blank lines, comments, event names: the client gets this gateway's framing
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    stream.done = True
                    continue
                try:
                    event = orjson.loads(payload)
                except orjson.JSONDecodeError:
                    progress.malformed += 1
                    continue
                if not isinstance(event, dict):
                    progress.malformed += 1
                    continue
                if isinstance(event.get("error"), dict):  # `"error": null` in an ordinary chunk is no error
                    progress.error = event
                    break
                encoded = self._event(stream, event, continuation, payload)
                if encoded is None:
                    continue
                if not progress.content and not _has_answer(event):
                    progress.held.append(encoded)
                    continue
                progress.content = True
                out.extend(progress.held)
                progress.held.clear()
                out.append(encoded)
            if out:
                # The client's pace is not the provider's: no idle time runs while the client reads.
                timer.reschedule(None)
                progress.sending = True
                if not stream.committed:
                    await self._commit(call, send, headers, stream)
                await send({"type": "http.response.body", "body": b"".join(out), "more_body": True})
                progress.sending = False
            if progress.error is not None:
                return
            if stream.done:
                # The answer is whole: the body's end is due at once, and an upstream that holds it open is given
                # a moment, not the idle timeout, before the client's stream ends (see `_ended_after_answer`).
                timer.reschedule(loop.time() + min(idle, AFTER_DONE_SECONDS))
            elif progress.content:
                timer.reschedule(loop.time() + idle)

    def _event(self, stream: _Stream, event: dict[str, Any], continuation: bool, payload: bytes) -> bytes | None:
        """One event as the client gets it (None: dropped). Tracks what was delivered; a continuation's
        events take the first part's id, lose their role delta, and the final usage sums the parts."""
        choices = event.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
        delta = choice.get("delta") if choice is not None else None
        usage = event.get("usage")
        if isinstance(usage, dict):
            counted = _counted(usage)
            if counted is not None:
                stream.usage.append(counted)
        if not continuation:
            stream.ident = event.get("id")  # of the part the client gets, whose events go as they came
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str) and content:
                stream.text.append(content)
            if delta.get("tool_calls"):
                stream.tool_calls = True
        if choice is not None and choice.get("finish_reason"):
            stream.finished = True
        if not continuation:
            return b"data: " + payload + b"\n\n"
        event["id"] = stream.ident
        if isinstance(delta, dict):
            delta.pop("role", None)
            finishing = choice is not None and bool(choice.get("finish_reason"))
            if not any(delta.values()) and not finishing and not isinstance(usage, dict):
                return None
        if isinstance(usage, dict) and len(stream.usage) > 1:
            event["usage"] = _usage_total(stream.usage)
        return b"data: " + orjson.dumps(event) + b"\n\n"

    async def _give_up(
        self, call: Exchange, send: Any, action: GiveUp, failures: list[_Failure], stream: _Stream | None
    ) -> None:
        """The client gets the failure the planner names: the provider's own error response unchanged (an error
        event in a stream of its own), a gateway error for a transport failure, or, once a stream has started, an
        error event naming the failure that broke it (never [DONE])."""
        chosen = next((f for f in failures if f.attempt is action.last_failure), failures[-1])
        if stream is not None and stream.committed:
            if stream.usage:
                _sum_usage(call, stream)
            await self._end_interrupted(
                call, send, f"The upstream stream was interrupted: {chosen.message}", code=_stream_code(chosen.kind)
            )
            return
        if stream is not None and chosen.event is not None:
            # The provider's own error event, before any answer: relayed as it came, in a stream, as the default path
            # does (a gateway 502 would lose its type, and clients retry it).
            await self._commit(call, send, chosen.headers, stream)
            call.error_kind = "error_event"
            self._log(call)
            event = b"data: " + orjson.dumps(chosen.event) + b"\n\n"
            await send({"type": "http.response.body", "body": event, "more_body": False})
            return
        extra = [*chosen.headers, _attempts(call)]
        response = chosen.response
        if response is not None:
            call.status, call.error_kind = response.status, "upstream_status"
            self._log(call)
            await respond(send, response.status, response.body, headers=response.headers, extra=extra)
            return
        timeout = chosen.attempt.failure is FailureClass.TIMEOUT
        status = 504 if timeout else _STATUS_OF_KIND.get(chosen.kind, 502)
        call.status, call.error_kind = status, chosen.kind
        self._log(call)
        body = openai_error(chosen.message, kind="upstream_error", code=chosen.kind)
        await respond(send, status, body, extra=extra)


# -- helpers -----------------------------------------------------------------------------------------------


def _max_tokens(snap: Snapshot, target: Candidate) -> int | None:
    """The catalog's default `max_tokens` for the target's model (for protocols that require one)."""
    model = snap.models.get(target.model)
    return model.max_output_tokens if model is not None else None


def _untranslatable(exc: TranslationError, target: Candidate) -> bytes:
    message = f"{exc.message} (`{target.model}` via {target.provider} speaks another protocol)"
    return openai_error(message, kind="invalid_request_error", code="unsupported_parameter", param=exc.param)


def _callable(snap: Snapshot, target: Target) -> bool:
    provider = snap.providers.get(target.provider)
    # A provider whose stored key cannot be decrypted is skipped like an unknown protocol: the chain
    # serves, and its circuit is never consulted (a configuration fault is not the provider being down).
    return provider is not None and provider.protocol in ADAPTERS and not provider.credential_unavailable


def _candidates(
    snap: Snapshot, primary: Target, entries: tuple[Target, ...], primary_ok: bool, engine: BreakerEngine
) -> list[Candidate]:
    """The primary (when this gateway can call it), then each callable chain entry, with its step."""
    out = []
    if primary_ok:
        out.append(_candidate(snap, primary, 0, engine))
    for step, entry in enumerate(entries, start=1):
        # An entry this gateway cannot call is skipped before it could take a probe slot.
        if _callable(snap, entry):
            out.append(_candidate(snap, entry, step, engine))
    if not primary_ok:
        # The planner's optimistic call names candidates[0]; run() refuses it when the primary is not callable.
        out.insert(0, Candidate(primary.provider, primary.model, None, False, _never, 0))
    return out


def _never() -> bool:
    return False


def _candidate(snap: Snapshot, target: Target, step: int, engine: BreakerEngine) -> Candidate:
    model = snap.models.get(target.model)
    window = model.context_window if model is not None else None
    prefill = model is not None and PREFILL in model.capabilities
    return Candidate(
        target.provider, target.model, window, prefill, _Circuit(engine, target.provider, target.model), step
    )


def _decision(target: Candidate) -> Decision | None:
    circuit = target.allows
    return circuit.decision if isinstance(circuit, _Circuit) else None


def _serve(call: Exchange, served: Target, step: int) -> None:
    call.served, call.chain_step = served, step
    call.fallback = step > 0


def _attempt_record(call: Exchange, served: Target) -> dict[str, Any]:
    record: dict[str, Any] = {
        "provider": served.provider,
        "model": served.model,
        "status": None,
        "error": None,
        "duration_ms": 0.0,
    }
    call.attempts.append(record)
    return record


# (requested model, served model, fallback-from provider or None) -> the attribution headers other than the
# request id, built once. The keys come from configured routes only; the bound is a backstop.
_ATTRIBUTION: dict[tuple[str, str, str | None], tuple[tuple[bytes, bytes], tuple[tuple[bytes, bytes], ...]]] = {}
_ATTRIBUTION_MAX = 4096


def _attribution(call: Exchange, target: Target) -> list[tuple[bytes, bytes]]:
    """The response's x-vidai- headers for `target` (x-vidai-attempts is added by the caller)."""
    assert call.route is not None
    key = (call.requested_model, target.model, call.route.primary.provider if call.fallback else None)
    built = _ATTRIBUTION.get(key)
    if built is None:
        built = _attribution_built(*key)
        if len(_ATTRIBUTION) >= _ATTRIBUTION_MAX:
            _ATTRIBUTION.clear()
        _ATTRIBUTION[key] = built
    model, rest = built
    return [model, (b"x-vidai-request-id", call.request_id.encode()), *rest]


def _attribution_built(
    requested: str, served: str, fallback_from: str | None
) -> tuple[tuple[bytes, bytes], tuple[tuple[bytes, bytes], ...]]:
    rest = []
    if requested != served:
        rest.append((b"x-vidai-requested-model", requested.encode()))
    if fallback_from is not None:
        rest.append((b"x-vidai-fallback", b"true"))
        rest.append((b"x-vidai-fallback-from", fallback_from.encode()))
    return (b"x-vidai-model", served.encode()), tuple(rest)


def _attempts(call: Exchange) -> tuple[bytes, bytes]:
    """`x-vidai-attempts`: upstream calls made for this request so far (a continuation adds one later)."""
    return (b"x-vidai-attempts", str(len(call.attempts)).encode())


def _has_answer(event: dict[str, Any]) -> bool:
    """Whether an event carries part of the answer (content, a tool call, a finish reason, usage)."""
    if event.get("usage"):
        return True
    choices = event.get("choices")
    if not isinstance(choices, list):
        return True  # an unknown event shape: relay it as it is
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if choice.get("finish_reason"):
            return True
        delta = choice.get("delta")
        if isinstance(delta, dict) and (delta.get("content") or delta.get("tool_calls") or delta.get("refusal")):
            return True
    return False


def _can_continue(stream: _Stream, original: bytes) -> bool:
    """A prefill can continue text, not a tool call, and only a single-choice answer."""
    if stream.tool_calls:
        return False
    try:
        payload = orjson.loads(original)
    except orjson.JSONDecodeError:
        return False
    n = payload.get("n") if isinstance(payload, dict) else None
    return n in (None, 1)


def _next_label(action: Call | Continue | GiveUp, failure: _Failure) -> str:
    """What the request did after this attempt failed, for its log record."""
    if isinstance(action, GiveUp):
        return f"give_up:{action.reason}"
    if isinstance(action, Continue):
        return "continue"
    return "retry" if action.target.key == failure.attempt.target.key else "move_on"


def _ended_after_answer(stream: _Stream | None, finished_before: bool) -> bool:
    """A stream cut, or held open past its end, after this attempt relayed its finish reason or [DONE]: the
    answer is whole, and the attempt ends as a success (never continued, nor counted against the provider)."""
    return stream is not None and not finished_before and (stream.done or stream.finished)


def _error_event(chunk: bytes) -> dict[str, Any] | None:
    """An error event (`data: {"error": ...}`) among a passed-through chunk's lines, if one is whole there."""
    for line in chunk.split(b"\n"):
        if line.startswith(b"data:") and b'"error"' in line:
            try:
                event = orjson.loads(line[5:].strip())
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict) and isinstance(event.get("error"), dict):
                return event
    return None


def _stream_code(kind: str) -> str:
    return "stream_interrupted" if kind != "stream_incomplete" else kind


def _error_message(body: Any) -> str:
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return str(error["message"])[:500]
    return ""


async def _close(chunks: Any) -> None:
    """Release an upstream stream's connection (an abandoned one is closed, never reused)."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()


def _counted(usage: dict[str, Any]) -> dict[str, int] | None:
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (_count(tokens_in) or _count(tokens_out)):
        return None
    return {
        "prompt_tokens": tokens_in if _count(tokens_in) else 0,
        "completion_tokens": tokens_out if _count(tokens_out) else 0,
    }


def _usage_total(parts: list[dict[str, int]]) -> dict[str, int]:
    prompt = sum(p["prompt_tokens"] for p in parts)
    completion = sum(p["completion_tokens"] for p in parts)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sum_usage(call: Exchange, stream: _Stream) -> None:
    """The request's tokens: the sum of what each relayed part reported."""
    if stream.usage:
        total = _usage_total(stream.usage)
        call.tokens_in, call.tokens_out = total["prompt_tokens"], total["completion_tokens"]


def _take_answer(call: Exchange, body: bytes, provider: str) -> None:
    """A whole 200 answer, parsed once: its usage is the request's, and the client's form of it is made
    (`call.shape`). One that is not a JSON object, or that the client cannot be given, is no answer: raises the
    upstream's `bad_response` (a 502, a connection error to the breaker, moved on by the policy), before any
    outcome is told or any log written."""
    try:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:  # JSON orjson refuses (a lone surrogate escape, a BOM): Python's reads it
            data = json.loads(body)
        if not isinstance(data, dict):
            raise TypeError(f"a JSON {type(data).__name__}, not an object")
        if call.shape is not None:
            call.shape(data)
    except (TranslationError, TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        raise UpstreamError("bad_response", f"{provider} sent an answer this gateway cannot read: {exc}") from None
    _take_usage(call, data.get("usage"))


def _finish_in_event(lines: bytes) -> bool:
    """A finish reason in a `data:` line of `lines` (a JSON body's, or a comment's, is none)."""
    match = _FINISHED.search(lines)
    while match is not None:
        start = max(lines.rfind(b"\n", 0, match.start()), lines.rfind(b"\r", 0, match.start())) + 1
        if lines.startswith(b"data:", start):
            return True
        match = _FINISHED.search(lines, match.end())
    return False


def _done_line(lines: bytes) -> bool:
    """Whether one of `lines` is `data: [DONE]` (as the policy path reads it)."""
    for line in lines.replace(b"\r", b"\n").split(b"\n"):
        if line.startswith(b"data:") and line[5:].strip() == b"[DONE]":
            return True
    return False


def _usage_from_sse(call: Exchange, lines: bytes) -> None:
    """Read usage from the `data:` lines among whole `lines`."""
    for line in lines.split(b"\n"):
        if line.startswith(b"data:") and b'"usage"' in line:
            try:
                event = orjson.loads(line[5:])
            except orjson.JSONDecodeError:
                continue
            if isinstance(event, dict):
                _take_usage(call, event.get("usage"))


def _take_usage(call: Exchange, usage: Any) -> None:
    """Token counts only when they are what they claim: non-negative integers of sane size."""
    if not isinstance(usage, dict):
        return
    tokens_in, tokens_out = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if _count(tokens_in):
        call.tokens_in = tokens_in
    if _count(tokens_out):
        call.tokens_out = tokens_out


def _count(value: Any) -> TypeGuard[int]:
    return type(value) is int and 0 <= value < 2**31


def _outcome_of(kind: str, failure: FailureClass | None = None) -> Outcome:
    """The breaker outcome of a call that produced no usable response, by its kind (and, for an error event,
    its class). A class that is never retried (a content filter or a context-length refusal in an error event)
    is the client's request, not the provider failing: reported as 400, which the breaker does not count.
    `credential_unavailable` (nothing was sent: the stored key cannot be decrypted) is a configuration fault, and
    `pool_full` (every connection this process may open to the provider is busy; nothing was sent) is this
    gateway's own limit: both reported as cancelled, which the breaker ignores and which still frees a probe
    slot. A provider that hangs still opens its circuit through the calls that hold those connections, which
    time out."""
    if failure is not None and failure in _NEUTRAL:
        return Outcome.of_status(_NOT_RETRYABLE_STATUS)
    if kind in TIMEOUT_KINDS:
        return Outcome.timeout()
    if kind in ("credential_unavailable", "pool_full"):
        return Outcome.cancelled()
    return Outcome.connection_error()
