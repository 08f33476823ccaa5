"""A fake upstream speaking three LLM APIs, with fault injection.

Each provider points at the simulator under its own name; the path picks the protocol:

    POST /<name>/v1/chat/completions                               OpenAI chat completions
    POST /<name>/v1/messages                                       Anthropic Messages (x-api-key, anthropic-version)
    POST /<name>/openai/deployments/<dep>/chat/completions?api-version=<v>   Azure OpenAI (api-key)

The behaviour of `<name>` comes from the control endpoint, or else from the name itself:

    ok (any other name)   200 with a completion
    fail-<status>         that status with an error in the protocol's shape (e.g. fail-503, fail-429)
    slow-<ms>             200 after <ms> milliseconds
    hang                  never answers (until the client gives up)
    close                 starts the response, then drops the connection
    midstream-<n>         streams <n> chunks (events), then drops the connection
    nodone                streams normally but never sends the end (`data: [DONE]`, `message_stop`)
    badusage              answers 200 with a malformed `usage` object (strings, negatives, a list)
    flaky-<pct>           <pct>% of calls answer 500, deterministically spread

Control endpoint (JSON): GET /_sim/state; PUT /_sim/providers/<name> with any field of
`Behaviour`; DELETE /_sim/providers/<name>; POST /_sim/reset (behaviours and counters).
More modes (reset, stall, malformed, context_length, content_filter, error_event), the fault
window (`fail_first`, `down_until`), `retry_after`, `first_token_ms`, `error_code` and
`reject_prefill` are described in docs/resilience.md ("Simulator faults"); the protocols, tool
use and each fault's Anthropic shape in docs/simulator.md. Every call's arrival time (monotonic)
is kept per provider in `Simulator.arrivals`, its body in `last_bodies`, its headers in `last_headers`.
"""

import asyncio
import json
import logging
import math
import re
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from itertools import pairwise
from typing import Any, Protocol
from urllib.parse import parse_qs

Scope = dict[str, Any]
Receive = Any
Send = Any

MODES = (
    "ok",
    "status",
    "hang",
    "close",
    "midstream",
    "flaky",
    "nodone",
    "badusage",
    "reset",
    "stall",
    "malformed",
    "context_length",
    "content_filter",
    "error_event",
)
# Behaviour fields given as strings (the others are numbers, and `reject_prefill` a boolean).
_STR_FIELDS = ("mode", "retry_after", "error_code")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
# `hang` and `stall` wait for the client's disconnect in slices of this many seconds, without end.
_HOLD_SLICE = 600.0


class DropConnection(Exception):
    """Raised after the response started: the server then closes the socket mid-response."""


class _QuietDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], DropConnection))


logging.getLogger("uvicorn.error").addFilter(_QuietDrops())


@dataclass(frozen=True)
class Behaviour:
    mode: str = "ok"
    status: int = 500
    latency_ms: float = 0.0
    chunks: int = 5
    chunk_delay_ms: float = 0.0
    fail_after_chunks: int = 2
    fail_rate: float = 0.0
    # Sent as `Retry-After` on error responses when not empty: seconds ("2") or an HTTP date.
    retry_after: str = ""
    # Replaces the `code` of the error body when not empty (e.g. "content_policy_violation").
    error_code: str = ""
    # Streams: delay between the response headers and the first chunk; otherwise before the body.
    first_token_ms: float = 0.0
    # The fault window: the first N calls only (0: no limit) and / or until this epoch time (0: no limit).
    fail_first: int = 0
    down_until: float = 0.0
    # A model without assistant prefill: a request whose last message is the assistant's is a 400.
    reject_prefill: bool = False

    @classmethod
    def from_name(cls, name: str) -> "Behaviour":
        """The behaviour a provider name asks for; a name whose argument is not a valid value of its field
        (`fail-700`, `slow-nan`, `midstream--1`) is an ordinary name, like `fail-abc`: it answers `ok`."""
        kind, _, arg = name.partition("-")
        try:
            if kind == "fail" and arg:
                return cls().updated({"mode": "status", "status": int(arg)})
            if kind == "slow" and arg:
                return cls().updated({"latency_ms": float(arg)})
            if kind == "midstream" and arg:
                return cls().updated({"mode": "midstream", "fail_after_chunks": int(arg)})
            if kind == "flaky" and arg:
                return cls().updated({"mode": "flaky", "fail_rate": float(arg) / 100})
        except ValueError:
            return cls()
        if name in ("hang", "close", "nodone", "badusage"):
            return cls(mode=name)
        return cls()

    def updated(self, data: dict[str, Any]) -> "Behaviour":
        known = {f.name: f.type for f in fields(self)}
        unknown = set(data) - set(known)
        if unknown:
            raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
        if "mode" in data and data["mode"] not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        return replace(self, **{k: _clean(k, known[k], v) for k, v in data.items()})

    def healed(self) -> "Behaviour":
        """What the provider does outside its fault window: a healthy answer at its usual pace."""
        return replace(self, mode="ok", first_token_ms=0.0, retry_after="", error_code="")


# The range of each numeric field (inclusive; None: no upper bound); a value outside it is a 400, as is a
# wrongly typed one. The integral fields take whole numbers only (3.0 is 3, 2.7 is refused).
_RANGES: dict[str, tuple[float, float | None]] = {
    "status": (100, 599),
    "chunks": (0, None),
    "fail_after_chunks": (0, None),
    "fail_first": (0, None),
    "latency_ms": (0, None),
    "chunk_delay_ms": (0, None),
    "first_token_ms": (0, None),
    "fail_rate": (0, 1),
    "down_until": (0, None),
}
_INTEGRAL = frozenset({"status", "chunks", "fail_after_chunks", "fail_first"})
# Control characters (C0 and DEL) have no place in a header value or an error code.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _clean(name: str, kind: Any, value: Any) -> Any:
    """`value` for field `name` (of type `kind`) as the behaviour keeps it; ValueError when it is not one."""
    if kind in (bool, "bool"):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name in _STR_FIELDS:
        return _clean_str(name, value)
    number = _finite(name, value)
    if name in _INTEGRAL and not number.is_integer():
        raise ValueError(f"{name} must be an integer")
    low, high = _RANGES[name]
    if high is not None and not low <= number <= high:
        raise ValueError(f"{name} must be between {low:g} and {high:g}")
    if number < low:
        raise ValueError(f"{name} must be at least {low:g}")
    return int(number) if name in _INTEGRAL else number


def _finite(name: str, value: Any) -> float:
    """A JSON number (not a string, not a boolean) as a finite float; ValueError otherwise (NaN, Infinity,
    1e999, an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number")
    return number


def _clean_str(name: str, value: Any) -> str:
    """A string field; `retry_after` also takes a JSON number of seconds (3 and 3.0 both become "3")."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ValueError(f"{name} must be a string")
    if isinstance(value, str):
        text = value
    else:
        try:
            seconds = _finite(name, value)
        except ValueError:
            seconds = -1.0
        if seconds < 0:
            raise ValueError(f"{name} must be a string or a finite number of seconds at least 0")
        text = str(int(seconds)) if seconds.is_integer() else str(seconds)
    if _CONTROL.search(text):
        raise ValueError(f"{name} must not contain control characters")
    if name == "retry_after" and not text.isascii():
        raise ValueError(f"{name} must be ASCII (it is sent as a header)")
    return text


class Simulator:
    """The ASGI app. One instance holds the behaviours and the per-provider request counters."""

    def __init__(
        self, *, clock: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        # `clock` decides `down_until` (epoch seconds); `monotonic` stamps arrivals. Tests may inject both.
        self.clock = clock
        self.monotonic = monotonic
        self.behaviours: dict[str, Behaviour] = {}
        self.requests: Counter[str] = Counter()
        # Arrival time (monotonic seconds) of every chat call, per provider, in order.
        self.arrivals: defaultdict[str, list[float]] = defaultdict(list)
        # Calls made under the behaviour now set (by identity), for `fail_first`.
        self._window: dict[str, tuple[Behaviour, int]] = {}
        # Streams that ran to their end (lets tests see a chunk arrive before the upstream finished).
        self.completed_streams: Counter[str] = Counter()
        # Calls whose client (the gateway) went away while the simulator held them (modes "hang", "stall").
        self.abandoned: Counter[str] = Counter()
        # Tests may hold a provider's stream after its first chunk until they set the event.
        self.gates: dict[str, threading.Event] = {}
        self._flaky_seq: Counter[str] = Counter()
        # The last request body each provider received, as sent (tests check what went upstream).
        self.last_bodies: dict[str, bytes] = {}
        # The last request headers each provider received, names lower-cased (x-api-key, api-key, ...).
        self.last_headers: dict[str, dict[str, str]] = {}

    def behaviour(self, name: str) -> Behaviour:
        return self.behaviours.get(name) or Behaviour.from_name(name)

    def gaps(self, name: str) -> list[float]:
        """Seconds between consecutive calls to `name`."""
        times = self.arrivals.get(name, [])
        return [b - a for a, b in pairwise(times)]

    def _effective(self, name: str) -> Behaviour:
        """The behaviour for this call: the one set, or its healed form outside the fault window."""
        b = self.behaviour(name)
        if not b.fail_first and not b.down_until:
            return b
        seen = self._window.get(name)
        calls = (seen[1] if seen is not None and seen[0] is b else 0) + 1
        self._window[name] = (b, calls)
        within = (not b.fail_first or calls <= b.fail_first) and (not b.down_until or self.clock() < b.down_until)
        return b if within else b.healed()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path.startswith("/_sim/"):
            await self._control(method, path, receive, send)
            return
        route = _route(method, path)
        if route is not None:
            await self._call(*route, scope, receive, send)
            return
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[1] == "v1":
            if "/".join(parts[2:]) == "models" and method == "GET":
                await _json(send, 200, {"object": "list", "data": [{"id": "simulated", "object": "model"}]})
                return
        await _json(send, 404, _error(f"No route for {method} {path}", "invalid_request_error"))

    async def _call(
        self, name: str, protocol: str, deployment: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """One chat call in any protocol: counted and recorded first, then checked, then answered."""
        self.arrivals[name].append(self.monotonic())
        body = await _read_body(receive)
        self.requests[name] += 1
        self.last_bodies[name] = body
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        self.last_headers[name] = headers
        # Malformed and unauthenticated requests are answered before the behaviour: they use no fault window.
        checked = _CHECKS[protocol](headers, scope.get("query_string", b""), body)
        if isinstance(checked, tuple):
            await _json(send, checked[0], checked[1])
            return
        await self._answer(name, _ANTHROPIC if protocol == "anthropic" else _OPENAI, deployment, checked, receive, send)

    async def _answer(
        self, name: str, dialect: "_Dialect", deployment: str, request: dict[str, Any], receive: Receive, send: Send
    ) -> None:
        """The behaviour's answer; `dialect` words it (errors, bodies, streams) in the call's protocol."""
        b = self._effective(name)
        if b.latency_ms:
            await asyncio.sleep(b.latency_ms / 1000)
        if b.mode == "reset":
            await _reset(send, receive)
            return
        if b.mode == "hang":
            await self._hold(name, receive)
            return
        messages = request.get("messages")
        if b.reject_prefill and isinstance(messages, list) and messages and _role(messages[-1]) == "assistant":
            await _json(send, 400, dialect.prefill_error(b.error_code))
            return
        if b.mode == "status" or (b.mode == "flaky" and self._flaky_fails(name, b.fail_rate)):
            await _json(send, b.status, dialect.status_error(name, b.status, b.error_code), retry_after=b.retry_after)
            return
        if b.mode == "context_length":
            await _json(send, 400, dialect.context_error(dialect.prompt_tokens(request)))
            return
        if b.mode == "content_filter":
            await _json(send, 400, dialect.filter_error(b.error_code))
            return
        if b.mode == "close":
            await send({"type": "http.response.start", "status": 200, "headers": [*_JSON, (b"content-length", b"512")]})
            await send({"type": "http.response.body", "body": b'{"id": "trunc', "more_body": True})
            raise DropConnection
        model = deployment or str(request.get("model", "unknown"))
        call = _Call(
            name=name,
            model=model,
            request=request,
            behaviour=b,
            seq=self.requests[name],
            prompt_tokens=dialect.prompt_tokens(request),
            reply=_reply(request, name, model, b.chunks),
        )
        if request.get("stream"):
            await self._stream(call, dialect.stream(call), receive, send)
            return
        if b.mode == "stall":
            await send({"type": "http.response.start", "status": 200, "headers": [*_JSON, (b"content-length", b"512")]})
            await self._hold(name, receive)
            return
        await _json(send, 200, dialect.completion(call), first_byte_ms=b.first_token_ms)

    async def _hold(self, name: str, receive: Receive) -> None:
        """Keep the socket open, sending nothing, until the client goes away, however long that takes."""
        while not await _wait_disconnect(receive, limit=_HOLD_SLICE):
            pass
        self.abandoned[name] += 1

    async def _stream(self, call: "_Call", stream: "_Stream", receive: Receive, send: Send) -> None:
        """Send a stream's events with the behaviour's fault after the first N of them (N: `fail_after_chunks`,
        counting the events this stream sends, whatever a prefill skipped); when the stream has N events or
        fewer, the fault comes at its end, before the final chunk."""
        b = call.behaviour
        fault_at = min(b.fail_after_chunks, len(stream.events))
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        if b.first_token_ms:
            await asyncio.sleep(b.first_token_ms / 1000)
        for position, event in enumerate([*stream.events, None]):
            if position == fault_at and await self._fault(call, stream, receive, send):
                return
            if event is None:
                break
            await send({"type": "http.response.body", "body": event, "more_body": True})
            gate = self.gates.get(call.name)
            if position == 0 and gate is not None:
                await asyncio.to_thread(gate.wait, 30)
            if b.chunk_delay_ms:
                await asyncio.sleep(b.chunk_delay_ms / 1000)
        self.completed_streams[call.name] += 1
        done = b"" if b.mode == "nodone" else stream.done
        await send({"type": "http.response.body", "body": stream.tail + done, "more_body": False})

    async def _fault(self, call: "_Call", stream: "_Stream", receive: Receive, send: Send) -> bool:
        """The stream fault, once N events went out: True when it ended the stream (`malformed` sends its
        event and lets the stream go on)."""
        mode = call.behaviour.mode
        if mode == "midstream":
            raise DropConnection
        if mode == "stall":
            await self._hold(call.name, receive)
            return True
        if mode == "error_event":
            await send({"type": "http.response.body", "body": stream.error, "more_body": False})
            return True
        if mode == "malformed":
            await send({"type": "http.response.body", "body": stream.malformed, "more_body": True})
        return False

    def _flaky_fails(self, name: str, rate: float) -> bool:
        # Deterministic spread: call n fails when floor(n*rate) increases.
        self._flaky_seq[name] += 1
        n = self._flaky_seq[name]
        return int(n * rate) > int((n - 1) * rate)

    async def _control(self, method: str, path: str, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if path == "/_sim/state" and method == "GET":
            names = sorted(set(self.behaviours) | set(self.requests))
            await _json(
                send,
                200,
                {
                    n: {
                        "behaviour": asdict(self.behaviour(n)),
                        "requests": self.requests[n],
                        "arrivals": self.arrivals[n],
                    }
                    for n in names
                },
            )
            return
        if path == "/_sim/reset" and method == "POST":
            self.behaviours.clear()
            self.requests.clear()
            self.completed_streams.clear()
            self._flaky_seq.clear()
            self.last_bodies.clear()
            self.last_headers.clear()
            self.arrivals.clear()
            self.abandoned.clear()
            self._window.clear()
            await _json(send, 200, {"reset": True})
            return
        if path.startswith("/_sim/providers/"):
            name = path.removeprefix("/_sim/providers/").strip("/")
            if method == "DELETE":
                self.behaviours.pop(name, None)
                await _json(send, 200, asdict(self.behaviour(name)))
                return
            if method == "PUT":
                try:
                    data = json.loads(body or b"{}")
                    if not isinstance(data, dict):
                        raise ValueError("body must be a JSON object")
                    self.behaviours[name] = self.behaviour(name).updated(data)
                except (ValueError, TypeError, RecursionError) as exc:
                    # Invalid JSON (NaN and Infinity pass json.loads, and _clean refuses them), a body nested too
                    # deep to parse, an unknown field or mode, a wrongly typed or out-of-range value.
                    await _json(send, 400, _error(str(exc), "invalid_request_error"))
                    return
                await _json(send, 200, asdict(self.behaviours[name]))
                return
        await _json(send, 404, _error(f"No control route {method} {path}", "invalid_request_error"))


# --- Protocols -----------------------------------------------------------------------------------------
# One request's answer is decided once (`_reply`), then written in the protocol's words by a dialect.

_CALL_ID = "call_sim_1"
_TOOL_USE_ID = "toolu_sim_1"
_TOOL_INPUT = {"query": "sim"}
_TOOL_ARGUMENTS = json.dumps(_TOOL_INPUT)
# The arguments stream in two pieces, so a client must join deltas to read them.
_TOOL_PIECES = ('{"query": ', '"sim"}')
_TOOL_TOKENS = len(_TOOL_ARGUMENTS.split()) + 1
_OVERLOADED = "Overloaded"


@dataclass(frozen=True)
class _Reply:
    """What the model answers, whatever the protocol: a text, or a call of `tool`."""

    text: str = ""
    tool: str = ""
    # Streamed pieces (words or argument parts), one a chunk (event).
    pieces: tuple[str, ...] = ()

    @property
    def tokens(self) -> int:
        return _TOOL_TOKENS if self.tool else len(self.text.split())

    @property
    def stream_tokens(self) -> int:
        return _TOOL_TOKENS if self.tool else len(self.pieces)


@dataclass(frozen=True)
class _Call:
    name: str
    model: str
    request: dict[str, Any]
    behaviour: Behaviour
    seq: int
    prompt_tokens: int
    reply: _Reply


@dataclass(frozen=True)
class _Stream:
    """A stream in a protocol's bytes; `Simulator._stream` applies the faults."""

    # The bytes of each event before the end.
    events: list[bytes]
    # Sent when the stream runs to its end; `done` (the end marker) is left out by mode "nodone".
    tail: bytes
    done: bytes
    malformed: bytes
    error: bytes


def _reply(request: dict[str, Any], name: str, model: str, chunks: int) -> _Reply:
    """A tool result is echoed; else the first tool is called; else the usual text (prefill continued)."""
    messages = request.get("messages")
    result = _tool_result(messages)
    if result is not None:
        text = f"Tool said: {result}"
        return _Reply(text=text, pieces=tuple(re.findall(r"\S+\s*", text)))
    tool = _first_tool(request.get("tools"))
    if tool:
        return _Reply(tool=tool, pieces=_TOOL_PIECES)
    # A prefilled answer (the last message is the assistant's) goes on after the words it already has.
    skip = _prefilled_words(messages)
    words = tuple(f"word{i} " for i in range(skip + 1, chunks))
    return _Reply(text=f"Simulated reply from {name} for {model}.", pieces=words)


def _tool_result(messages: Any) -> str | None:
    """The content of the tool result the conversation ends with (OpenAI or Anthropic), or None."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return None
    last = messages[-1]
    if last.get("role") == "tool":
        return _text(last.get("content"))
    content = last.get("content")
    if last.get("role") == "user" and isinstance(content, list):
        for block in content:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                return _text(block.get("content"))
    return None


def _first_tool(tools: Any) -> str:
    """The name of the first tool offered (OpenAI `function.name` or Anthropic `name`), or ""."""
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return ""
    function = tools[0].get("function")
    name = function.get("name") if isinstance(function, dict) else tools[0].get("name")
    return str(name or "tool")


def _text(content: Any) -> str:
    """The text of a message content: a string, or a list of parts / blocks (text, tool_result)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(t for part in content if (t := _part_text(part)))
    return str(content)


def _part_text(part: Any) -> str:
    if not isinstance(part, dict):
        return _text(part)
    if "text" in part:
        return _text(part["text"])
    return _text(part.get("content"))


class _Dialect(Protocol):
    def prompt_tokens(self, request: dict[str, Any]) -> int: ...
    def status_error(self, name: str, status: int, code: str) -> dict[str, Any]: ...
    def prefill_error(self, code: str) -> dict[str, Any]: ...
    def context_error(self, tokens: int) -> dict[str, Any]: ...
    def filter_error(self, code: str) -> dict[str, Any]: ...
    def completion(self, call: _Call) -> dict[str, Any]: ...
    def stream(self, call: _Call) -> _Stream: ...


class _OpenAIDialect:
    """Chat completions (OpenAI and the Azure OpenAI deployment path)."""

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        return _count_tokens(request.get("messages"))

    def status_error(self, name: str, status: int, code: str) -> dict[str, Any]:
        return _error(f"Simulated {status} from {name}", "server_error", code or None)

    def prefill_error(self, code: str) -> dict[str, Any]:
        return _error(_PREFILL, "invalid_request_error", code or "prefill_unsupported")

    def context_error(self, tokens: int) -> dict[str, Any]:
        payload = _error(_context_message(tokens), "invalid_request_error", "context_length_exceeded")
        payload["error"]["param"] = "messages"
        return payload

    def filter_error(self, code: str) -> dict[str, Any]:
        payload = _error(_FILTERED, "invalid_request_error", code or "content_filter")
        payload["error"]["param"] = "prompt"
        return payload

    def completion(self, call: _Call) -> dict[str, Any]:
        reply, prompt = call.reply, call.prompt_tokens
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.tool:
            message = {"role": "assistant", "content": None, "tool_calls": [_openai_tool_call(reply.tool)]}
        usage: Any = (
            {"prompt_tokens": str(prompt), "completion_tokens": -1}
            if call.behaviour.mode == "badusage"
            else {"prompt_tokens": prompt, "completion_tokens": reply.tokens, "total_tokens": prompt + reply.tokens}
        )
        return {
            "id": f"chatcmpl-sim-{call.seq}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": call.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.tool else "stop"}],
            "usage": usage,
        }

    def stream(self, call: _Call) -> _Stream:
        reply, created, ident = call.reply, int(time.time()), f"chatcmpl-sim-{call.seq}"

        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
            choices = [{"index": 0, "delta": delta, "finish_reason": finish}]
            return _sse(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": call.model,
                    "choices": [] if "usage" in extra else choices,
                    **extra,
                }
            )

        if reply.tool:
            call_header = {"index": 0, **_openai_tool_call(reply.tool, "")}
            opening: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call_header]}
            deltas: list[dict[str, Any]] = [
                {"tool_calls": [{"index": 0, "function": {"arguments": p}}]} for p in reply.pieces
            ]
        else:
            opening = {"role": "assistant", "content": ""}
            deltas = [{"content": p} for p in reply.pieces]
        tail = chunk({}, "tool_calls" if reply.tool else "stop")
        if (call.request.get("stream_options") or {}).get("include_usage"):  # an object (see _check_openai)
            prompt, words = call.prompt_tokens, reply.stream_tokens
            usage: Any = (
                []
                if call.behaviour.mode == "badusage"
                else {"prompt_tokens": prompt, "completion_tokens": words, "total_tokens": prompt + words}
            )
            tail += chunk({}, usage=usage)
        kind = call.behaviour.error_code or "overloaded_error"
        return _Stream(
            events=[chunk(opening), *(chunk(d) for d in deltas)],
            tail=tail,
            done=b"data: [DONE]\n\n",
            malformed=b"data: {not json\n\n",
            error=_sse({"error": {"message": _OVERLOADED, "type": kind, "param": None, "code": None}}),
        )


def _openai_tool_call(tool: str, arguments: str = _TOOL_ARGUMENTS) -> dict[str, Any]:
    return {"id": _CALL_ID, "type": "function", "function": {"name": tool, "arguments": arguments}}


class _AnthropicDialect:
    """The Anthropic Messages API (`/v1/messages`)."""

    def prompt_tokens(self, request: dict[str, Any]) -> int:
        return _count_tokens(request.get("messages")) + len(_text(request.get("system")).split())

    def status_error(self, name: str, status: int, code: str) -> dict[str, Any]:
        return _anthropic_error(code or _anthropic_kind(status), f"Simulated {status} from {name}")

    def prefill_error(self, code: str) -> dict[str, Any]:
        return _anthropic_error(code or "invalid_request_error", _ANTHROPIC_PREFILL)

    def context_error(self, tokens: int) -> dict[str, Any]:
        message = f"prompt is too long: {max(tokens, 8193)} tokens > 8192 maximum"
        return _anthropic_error("invalid_request_error", message)

    def filter_error(self, code: str) -> dict[str, Any]:
        return _anthropic_error(code or "invalid_request_error", _ANTHROPIC_FILTERED)

    def completion(self, call: _Call) -> dict[str, Any]:
        reply = call.reply
        block = _tool_use(reply.tool, _TOOL_INPUT) if reply.tool else {"type": "text", "text": reply.text}
        usage: Any = (
            {"input_tokens": str(call.prompt_tokens), "output_tokens": -1}
            if call.behaviour.mode == "badusage"
            else {"input_tokens": call.prompt_tokens, "output_tokens": reply.tokens}
        )
        return {
            "id": f"msg_sim-{call.seq}",
            "type": "message",
            "role": "assistant",
            "model": call.model,
            "content": [block],
            "stop_reason": "tool_use" if reply.tool else "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }

    def stream(self, call: _Call) -> _Stream:
        reply, bad = call.reply, call.behaviour.mode == "badusage"
        message = {
            **self.completion(call),
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": str(call.prompt_tokens), "output_tokens": -1}
            if bad
            else {"input_tokens": call.prompt_tokens, "output_tokens": 1},
        }
        if reply.tool:
            block = _tool_use(reply.tool, {})
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in reply.pieces]
        else:
            block = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in reply.pieces]
        events = [
            _event("message_start", message=message),
            _event("content_block_start", index=0, content_block=block),
            _event("ping"),
            *(_event("content_block_delta", index=0, delta=d) for d in deltas),
        ]
        stop = {"stop_reason": "tool_use" if reply.tool else "end_turn", "stop_sequence": None}
        usage: Any = [] if bad else {"output_tokens": reply.stream_tokens}
        kind = call.behaviour.error_code or "overloaded_error"
        return _Stream(
            events=events,
            tail=_event("content_block_stop", index=0) + _event("message_delta", delta=stop, usage=usage),
            done=_event("message_stop"),
            malformed=b"event: content_block_delta\ndata: {not json\n\n",
            error=_event("error", error={"type": kind, "message": _OVERLOADED}),
        )


def _tool_use(tool: str, tool_input: dict[str, Any]) -> dict[str, Any]:
    return {"type": "tool_use", "id": _TOOL_USE_ID, "name": tool, "input": tool_input}


def _event(kind: str, **fields: Any) -> bytes:
    """One Anthropic server-sent event: its name, then its JSON (which repeats the name as `type`)."""
    return f"event: {kind}\n".encode() + _sse({"type": kind, **fields})


def _anthropic_error(kind: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _anthropic_kind(status: int) -> str:
    """Anthropic's error type for an HTTP status."""
    if status == 529:
        return "overloaded_error"
    if status >= 500:
        return "api_error"
    return _ANTHROPIC_KINDS.get(status, "invalid_request_error")


_ANTHROPIC_KINDS = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
}
_OPENAI: _Dialect = _OpenAIDialect()
_ANTHROPIC: _Dialect = _AnthropicDialect()


# --- Routes and request checks ---------------------------------------------------------------------------

Checked = dict[str, Any] | tuple[int, dict[str, Any]]


def _route(method: str, path: str) -> tuple[str, str, str] | None:
    """(provider name, protocol, Azure deployment or "") for a chat call's path, else None."""
    parts = path.strip("/").split("/")
    if method != "POST" or len(parts) < 3:
        return None
    if parts[1:] == ["v1", "chat", "completions"]:
        return parts[0], "openai", ""
    if parts[1:] == ["v1", "messages"]:
        return parts[0], "anthropic", ""
    if len(parts) == 6 and parts[1:3] == ["openai", "deployments"] and parts[4:] == ["chat", "completions"]:
        return parts[0], "azure", parts[3]
    return None


def _parse(body: bytes) -> dict[str, Any] | None:
    try:
        request = json.loads(body or b"{}")
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deep
        return None
    return request if isinstance(request, dict) else None


def _check_openai(headers: dict[str, str], query: bytes, body: bytes) -> Checked:
    request = _parse(body)
    if request is None:
        return 400, _error("Invalid JSON body", "invalid_request_error")
    if not isinstance(request.get("stream_options") or {}, dict):
        return 400, _error("stream_options must be an object", "invalid_request_error")
    return request


def _check_azure(headers: dict[str, str], query: bytes, body: bytes) -> Checked:
    if not headers.get("api-key"):
        return 401, {"error": {"code": "401", "message": _AZURE_KEY}}
    if not parse_qs(query.decode("latin-1")).get("api-version"):
        return 400, {"error": {"code": "MissingApiVersionParameter", "message": _AZURE_VERSION}}
    return _check_openai(headers, query, body)


def _check_anthropic(headers: dict[str, str], query: bytes, body: bytes) -> Checked:
    if not headers.get("x-api-key"):
        return 401, _anthropic_error("authentication_error", "x-api-key header is required")
    if not headers.get("anthropic-version"):
        return 400, _anthropic_error("invalid_request_error", "anthropic-version: header is required")
    request = _parse(body)
    if request is None:
        return 400, _anthropic_error("invalid_request_error", "There was an error parsing the body as JSON")
    if "max_tokens" not in request:
        return 400, _anthropic_error("invalid_request_error", "max_tokens: Field required")
    return request


_CHECKS: dict[str, Callable[[dict[str, str], bytes, bytes], Checked]] = {
    "openai": _check_openai,
    "azure": _check_azure,
    "anthropic": _check_anthropic,
}
_AZURE_KEY = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a valid key "
    "for an active subscription and use a correct regional API endpoint for your resource."
)
_AZURE_VERSION = "The api-version query parameter (?api-version=) is required for all requests."
_ANTHROPIC_PREFILL = (
    "This model does not support assistant message prefill. The conversation must end with a user message."
)
_ANTHROPIC_FILTERED = "Output blocked by content filtering policy"


_PREFILL = "This model does not support assistant message prefill: the final message must have role user."
_FILTERED = (
    "The response was filtered due to the prompt triggering the content management policy. "
    "Please modify your prompt and retry."
)


def _context_message(tokens: int) -> str:
    return (
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        f"{max(tokens, 8193)} tokens. Please reduce the length of the messages."
    )


def _prefilled_words(messages: Any) -> int:
    """How many words of the answer a trailing assistant message (a prefill) already holds."""
    if not isinstance(messages, list) or not messages or _role(messages[-1]) != "assistant":
        return 0
    return len(_text(messages[-1].get("content")).split())


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _error(message: str, kind: str, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


async def _reset(send: Send, receive: Receive) -> None:
    """Close the client's socket with a TCP reset before any response byte.

    ASGI has no message for this, so it reaches the server's transport through `send`'s
    owner (uvicorn's request cycle, h11 and httptools alike).
    """
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("reset needs uvicorn's transport")
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # Linger 0: close() sends RST instead of FIN.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()
    # Let the server see the connection lost, so it does not try to answer on it.
    await _wait_disconnect(receive, limit=5)


def _sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _count_tokens(messages: Any) -> int:
    if not isinstance(messages, list):
        return 0
    return sum(len(_text(m.get("content", "")).split()) for m in messages if isinstance(m, dict)) + 3


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


async def _wait_disconnect(receive: Receive, limit: float) -> bool:
    """True when the client went away, False when `limit` passed first."""
    try:
        async with asyncio.timeout(limit):
            while (await receive())["type"] != "http.disconnect":
                pass
    except TimeoutError:
        return False
    return True


async def _json(send: Send, status: int, payload: Any, *, retry_after: str = "", first_byte_ms: float = 0.0) -> None:
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [*_JSON, (b"content-length", str(len(body)).encode())]
    if retry_after:
        headers.append((b"retry-after", retry_after.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    if first_byte_ms:
        await asyncio.sleep(first_byte_ms / 1000)
    await send({"type": "http.response.body", "body": body})


app = Simulator()
