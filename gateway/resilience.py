"""What to call next: the pure core of the attempt loop (default behaviour and the resilience policy).

Nothing here does I/O, awaits, or touches Django. The caller supplies the candidates (the primary, then the
chain entries), each with a callable that asks its circuit whether a call may go now (only the breaker may
hand out a half-open probe, so the planner asks that callable last, and only of the target it is about to
return: a True answer is a promise to call). Time (`now`, monotonic seconds) and randomness (`rng`) are
injected, so every decision can be replayed in a test.

    policy = snapshot_chain.resilience  # chains.resilience.ResiliencePolicy
    attempts: list[Attempt] = []
    action = next_action(candidates=cands, policy=policy, attempts=attempts, now=clock(), started=t0, rng=rng)
    # Call -> wait until not_before, call, append an Attempt on failure, ask again.
    # Continue -> the stream broke after its first byte: resume on action.target with prefill.
    # GiveUp -> answer with action.last_failure's own response (or the error the reason names).

See docs/resilience.md for the rules and a timeline per failure kind.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from enum import StrEnum
from typing import Any

from chains.resilience import ResiliencePolicy as _ChainPolicy

# --- The policy ------------------------------------------------------------------------------------------

# One class, shared with the chains app (its knobs, bounds and validation live there): the snapshot carries
# each chain's effective policy, every knob filled in; `enabled=False` is the default behaviour.
ResiliencePolicy = _ChainPolicy


# --- The error taxonomy ----------------------------------------------------------------------------------


class FailureClass(StrEnum):
    RATE_LIMIT = "rate_limit"  # 429
    OVERLOADED = "overloaded"  # 503, Anthropic's 529, an `overloaded_error`
    SERVER_ERROR = "server_error"  # other 5xx
    TIMEOUT = "timeout"  # connect, first token, stream idle, the deadline
    CONNECTION = "connection"  # reset or refused before any response, a stream cut
    CONTEXT_LENGTH = "context_length"  # the prompt does not fit the model's context window
    CONTENT_FILTER = "content_filter"  # a content-policy refusal
    INVALID_REQUEST = "invalid_request"  # 400, 404, 422 and other 4xx
    AUTH = "auth"  # 401, 403


# The client gets the provider's own error, unchanged: never retried, never moved on.
NOT_RETRYABLE = frozenset({FailureClass.CONTENT_FILTER, FailureClass.INVALID_REQUEST, FailureClass.AUTH})
# Retried on the same target (before the first byte) while its retries last.
_RETRY_SAME = frozenset({FailureClass.RATE_LIMIT, FailureClass.OVERLOADED, FailureClass.CONNECTION})
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})

# The transport's and the attempt loop's timeout kinds (the request log's `error`, the breaker's timeout).
TIMEOUT_KINDS = frozenset(
    {"timeout", "connect_timeout", "first_token_timeout", "idle_timeout", "read_timeout", "deadline"}
)

_CONTEXT_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
_CONTEXT_PHRASES = (
    "maximum context length",  # OpenAI, Azure OpenAI, vLLM, Groq
    "context_length_exceeded",
    "prompt is too long",  # Anthropic
    "exceed context limit",  # Anthropic: input length and `max_tokens` exceed context limit
    "context window",  # "exceeds the context window", "context window exceeded"
    "longer than the model's context length",  # vLLM
    "too large for model with",  # Mistral: "... too large for model with N maximum context length"
    "input is too long",  # Bedrock
    "too many input tokens",  # Bedrock
    "exceeds the maximum number of tokens",  # Gemini
    "reduce the length of the messages",  # OpenAI-compatible servers
)
_FILTER_CODES = frozenset({"content_filter", "content_policy_violation", "responsibleaipolicyviolation"})
_FILTER_PHRASES = ("content management policy", "content_policy_violation", "content filter")
_TYPE_CLASSES: dict[str, FailureClass] = {
    "overloaded_error": FailureClass.OVERLOADED,
    "rate_limit_error": FailureClass.RATE_LIMIT,
    "rate_limit_exceeded": FailureClass.RATE_LIMIT,
    "api_error": FailureClass.SERVER_ERROR,
    "server_error": FailureClass.SERVER_ERROR,
    "invalid_request_error": FailureClass.INVALID_REQUEST,
    "not_found_error": FailureClass.INVALID_REQUEST,
    "authentication_error": FailureClass.AUTH,
    "permission_error": FailureClass.AUTH,
}


def classify(status: int | None, error_kind: str | None, body: bytes | dict[str, Any] | None) -> FailureClass:
    """The class of one failed attempt.

    `status` is the upstream's HTTP status (None when no response arrived, or for an error event inside a
    stream), `error_kind` the transport's kind when there was no response ("timeout", "idle_timeout",
    "connection_error", ...), `body` the error body or the stream's error event. The body wins for the two
    classes that arrive as a plain 400 (context length, content filter); then the status; then the body's
    error type (an error event has no status of its own); then the transport's kind.
    """
    codes, text = _error_fields(body)
    if codes & _FILTER_CODES or any(p in text for p in _FILTER_PHRASES):
        return FailureClass.CONTENT_FILTER
    if codes & _CONTEXT_CODES or any(p in text for p in _CONTEXT_PHRASES):
        return FailureClass.CONTEXT_LENGTH
    if status is not None and status >= 400:
        return _status_class(status)
    for code in sorted(codes):
        if code in _TYPE_CLASSES:
            return _TYPE_CLASSES[code]
    if error_kind is not None and error_kind in TIMEOUT_KINDS:
        return FailureClass.TIMEOUT
    if error_kind == "pool_full":
        return FailureClass.OVERLOADED  # this gateway's connections to it are all busy: wait, then move on
    if body is not None and error_kind is None:
        return FailureClass.SERVER_ERROR  # an error event of no known type
    return FailureClass.CONNECTION


def _status_class(status: int) -> FailureClass:
    if status == 429:
        return FailureClass.RATE_LIMIT
    if status in (503, 529):
        return FailureClass.OVERLOADED
    if status >= 500:
        return FailureClass.SERVER_ERROR
    if status in (401, 403):
        return FailureClass.AUTH
    if status == 408:
        return FailureClass.TIMEOUT
    return FailureClass.INVALID_REQUEST


def _error_fields(body: bytes | dict[str, Any] | None) -> tuple[set[str], str]:
    """(lower-cased codes and types, lower-cased message text) of an error body, whatever its shape:
    OpenAI/Azure `{"error": {"code", "type", "message", "innererror": {"code"}}}`, Anthropic
    `{"type": "error", "error": {"type", "message"}}`, Gemini `{"error": {"status", "message"}}`."""
    if body is None:
        return set(), ""
    data: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            data = json.loads(body)
        except ValueError:
            return set(), body.decode("utf-8", "replace").lower()
    codes: set[str] = set()
    texts: list[str] = []

    def walk(node: Any, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("code", "type", "status") and isinstance(value, str):
                    codes.add(value.lower())
                elif key in ("message", "detail") and isinstance(value, str):
                    texts.append(value.lower())
                elif isinstance(value, dict | list):
                    walk(value, depth + 1)
        elif isinstance(node, list):
            for item in node[:8]:
                walk(item, depth + 1)
        elif isinstance(node, str):
            texts.append(node.lower())

    walk(data, 0)
    return codes, " ".join(texts)


def retry_after(headers: Mapping[str, str] | Iterable[tuple[Any, Any]], now: float) -> float | None:
    """Seconds to wait that the upstream asked for, or None. Reads `retry-after-ms` (OpenAI) first, then
    `Retry-After` as delta-seconds or an HTTP date; `now` is the wall clock (epoch seconds) the date is
    measured from. A date in the past gives 0; anything unreadable gives None."""
    values: dict[str, str] = {}
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in pairs:
        name = (key.decode("latin-1") if isinstance(key, bytes) else str(key)).lower()
        values[name] = (value.decode("latin-1") if isinstance(value, bytes) else str(value)).strip()
    ms = values.get("retry-after-ms")
    if ms:
        try:
            seconds = float(ms) / 1000
        except ValueError:
            seconds = -1.0
        if seconds >= 0 and seconds != float("inf"):
            return seconds
    raw = values.get("retry-after")
    if not raw:
        return None
    if raw.isascii() and raw.isdigit():  # str.isdigit takes "²" too, which float() refuses
        return float(raw)
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None  # an HTTP date is always GMT; a zone-less one is not one
    return max(0.0, when.timestamp() - now)


# --- The planner -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class Candidate:
    """One target the request may call: the primary (step 0) or a chain entry (step 1..n). `allows` asks
    its circuit; a True answer may have taken the half-open probe, so the target must then be called."""

    provider: str
    model: str
    context_window: int | None
    supports_prefill: bool
    allows: Callable[[], bool]
    step: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.provider, self.model)


@dataclass(frozen=True, slots=True)
class Attempt:
    """One failed attempt. `at` is when it started (monotonic seconds); `delivered` whether any byte of
    the response had reached the client; `retry_after` the upstream's Retry-After in seconds, if any."""

    target: Candidate
    failure: FailureClass
    at: float
    delivered: bool = False
    status: int | None = None
    retry_after: float | None = None


@dataclass(frozen=True, slots=True)
class Call:
    """Call `target` once the clock reaches `not_before`. `optimistic`: no circuit allowed a call and this
    is today's "optimistic primary" (the caller has no breaker decision to report to)."""

    target: Candidate
    not_before: float
    optimistic: bool = False


@dataclass(frozen=True, slots=True)
class Continue:
    """The stream broke after its first byte: resume on `target` with the text delivered so far as a
    trailing assistant message, and stream only the continuation."""

    target: Candidate


class GiveUpReason(StrEnum):
    DISABLED = "disabled"  # the policy is off: today's one call
    NOT_RETRYABLE = "not_retryable"  # 400/401/403/404/422 or a content filter: the provider's own error
    MAX_ATTEMPTS = "max_attempts"
    DEADLINE = "deadline"
    EXHAUSTED = "exhausted"  # no eligible target whose circuit allows a call
    NO_CONTINUATION = "no_continuation"  # after the first byte, no entry can continue with prefill


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop. `last_failure` is the failure the client is told about: the last one, except after the first
    byte, where it is the failure that broke the stream (never a later prefill rejection)."""

    reason: GiveUpReason
    last_failure: Attempt | None = field(default=None)


Action = Call | Continue | GiveUp


def backoff(policy: ResiliencePolicy, retry: int, rng: random.Random) -> float:
    """Seconds before retry number `retry` (1 = the first retry): full jitter over
    [0, min(cap, base * 2**(retry-1))], never below the floor."""
    ceiling = min(policy.backoff_cap_ms, policy.backoff_base_ms * 2 ** max(0, retry - 1)) / 1000
    return max(policy.floor, rng.uniform(0.0, ceiling))


def next_action(
    *,
    candidates: Sequence[Candidate],
    policy: ResiliencePolicy,
    attempts: Sequence[Attempt],
    now: float,
    started: float,
    rng: random.Random,
) -> Action:
    """The next step of one request. `candidates[0]` is the primary; `attempts` are the failed attempts so
    far, oldest first (a successful attempt ends the request and is never passed here)."""
    if not candidates:
        return GiveUp(GiveUpReason.EXHAUSTED, attempts[-1] if attempts else None)
    if not attempts:
        return _first_call(candidates, now)
    last = attempts[-1]
    if not policy.enabled:
        return GiveUp(GiveUpReason.DISABLED, last)
    broke = next((a for a in attempts if a.delivered), None)
    if len(attempts) >= policy.max_attempts:
        return GiveUp(GiveUpReason.MAX_ATTEMPTS, broke or last)
    deadline = started + policy.deadline_seconds
    if now >= deadline:
        return GiveUp(GiveUpReason.DEADLINE, broke or last)
    if broke is not None:
        return _continuation(candidates, attempts, broke)
    if last.failure in NOT_RETRYABLE:
        return GiveUp(GiveUpReason.NOT_RETRYABLE, last)
    retry = _retry(policy, attempts, last, now, deadline, rng)
    if retry is not None:
        return retry
    return _move_on(candidates, attempts, last, now)


def _first_call(candidates: Sequence[Candidate], now: float) -> Call:
    """Today's rule, policy on or off: the primary if its circuit allows, else the first chain entry that
    does, else the primary anyway (the caller refuses instead when an operator holds it)."""
    for candidate in candidates:
        if candidate.allows():
            return Call(candidate, now)
    return Call(candidates[0], now, optimistic=True)


def _retry(
    policy: ResiliencePolicy,
    attempts: Sequence[Attempt],
    last: Attempt,
    now: float,
    deadline: float,
    rng: random.Random,
) -> Call | None:
    """The same target again after a backoff, or None to move on."""
    if last.failure not in _RETRY_SAME and not (
        last.failure is FailureClass.SERVER_ERROR and last.status in _RETRY_STATUSES
    ):
        return None
    on_target = [a for a in attempts if a.target.key == last.target.key]
    retries_done = len(on_target) - 1
    if retries_done >= policy.max_retries:
        return None
    if last.retry_after is not None:
        if last.retry_after > policy.retry_after_cap_seconds:
            return None  # a long Retry-After: another entry answers sooner
        delay = max(last.retry_after, policy.floor)
    else:
        delay = backoff(policy, retries_done + 1, rng)
    # Never closer than the floor to any earlier attempt on this target (`at` is when each one started).
    not_before = max(now + delay, max(a.at for a in on_target) + policy.floor)
    if not_before >= deadline:
        return None
    if not last.target.allows():  # asked last: a True answer may be the probe, and is then used
        return None
    return Call(last.target, not_before)


def _move_on(candidates: Sequence[Candidate], attempts: Sequence[Attempt], last: Attempt, now: float) -> Action:
    """The next untried entry in chain order whose circuit allows a call; for a context-length failure,
    only entries whose context window is larger than every one that failed that way."""
    tried = {a.target.key for a in attempts}
    needed: int | None = None
    if last.failure is FailureClass.CONTEXT_LENGTH:
        windows = [a.target.context_window for a in attempts if a.failure is FailureClass.CONTEXT_LENGTH]
        if any(w is None for w in windows):
            return GiveUp(GiveUpReason.EXHAUSTED, last)  # no entry is known to be larger than an unknown
        needed = max(w for w in windows if w is not None)
    for candidate in candidates:
        if candidate.key in tried:
            continue
        if needed is not None and (candidate.context_window is None or candidate.context_window <= needed):
            continue
        if candidate.allows():
            return Call(candidate, now)
    return GiveUp(GiveUpReason.EXHAUSTED, last)


def _continuation(candidates: Sequence[Candidate], attempts: Sequence[Attempt], broke: Attempt) -> Action:
    """After the first byte: the first untried entry that supports prefill and whose circuit allows a
    call. A content filter ends the stream (its own error); any other failure of a continuation (a prefill
    rejection included) moves to the next such entry, and the client is told about `broke`."""
    last = attempts[-1]
    if last.failure is FailureClass.CONTENT_FILTER:
        return GiveUp(GiveUpReason.NOT_RETRYABLE, last)
    tried = {a.target.key for a in attempts}
    for candidate in candidates:
        if candidate.key in tried or not candidate.supports_prefill:
            continue
        if candidate.allows():
            return Continue(candidate)
    return GiveUp(GiveUpReason.NO_CONTINUATION, broke)
