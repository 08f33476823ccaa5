"""A fake upstream speaking the OpenAI chat-completions API, with fault injection.

Each provider points at `http://host:port/<name>/v1`. The behaviour of `<name>` comes
from the control endpoint, or else from the name itself:

    ok (any other name)   200 with a completion
    fail-<status>         that status with an OpenAI-shaped error (e.g. fail-503, fail-429)
    slow-<ms>             200 after <ms> milliseconds
    hang                  never answers (until the client gives up)
    close                 starts the response, then drops the connection
    midstream-<n>         streams <n> chunks, then drops the connection
    nodone                streams normally but never sends the final `data: [DONE]`
    badusage              answers 200 with a malformed `usage` object (strings, negatives, a list)
    flaky-<pct>           <pct>% of calls answer 500, deterministically spread

Control endpoint (JSON): GET /_sim/state; PUT /_sim/providers/<name> with any field of
`Behaviour`; DELETE /_sim/providers/<name>; POST /_sim/reset (behaviours and counters).
More modes (reset, stall, malformed, context_length, content_filter), the fault window
(`fail_first`, `down_until`), `retry_after`, `first_token_ms`, `error_code` and
`reject_prefill` are described in docs/resilience.md ("Simulator faults"). Every call's
arrival time (monotonic) is kept per provider in `Simulator.arrivals`.
"""

import asyncio
import json
import logging
import socket
import struct
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from itertools import pairwise
from typing import Any

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
)
# Behaviour fields given as strings (the others are numbers, and `reject_prefill` a boolean).
_STR_FIELDS = ("mode", "retry_after", "error_code")
_JSON = [(b"content-type", b"application/json")]
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


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
        kind, _, arg = name.partition("-")
        try:
            if kind == "fail" and arg:
                return cls(mode="status", status=int(arg))
            if kind == "slow" and arg:
                return cls(latency_ms=float(arg))
            if kind == "midstream" and arg:
                return cls(mode="midstream", fail_after_chunks=int(arg))
            if kind == "flaky" and arg:
                return cls(mode="flaky", fail_rate=float(arg) / 100)
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


def _clean(name: str, kind: Any, value: Any) -> Any:
    if kind in (bool, "bool"):
        if not isinstance(value, bool):
            raise ValueError(f"{name} must be true or false")
        return value
    if name in _STR_FIELDS:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise ValueError(f"{name} must be a string")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return str(value)
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a number")
    return int(value) if kind in (int, "int") else float(value)


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
        parts = path.strip("/").split("/")
        if len(parts) >= 3 and parts[1] == "v1":
            name, endpoint = parts[0], "/".join(parts[2:])
            if endpoint == "chat/completions" and method == "POST":
                await self._chat(name, receive, send)
                return
            if endpoint == "models" and method == "GET":
                await _json(send, 200, {"object": "list", "data": [{"id": "simulated", "object": "model"}]})
                return
        await _json(send, 404, _error(f"No route for {method} {path}", "invalid_request_error"))

    async def _chat(self, name: str, receive: Receive, send: Send) -> None:
        self.arrivals[name].append(self.monotonic())
        body = await _read_body(receive)
        self.requests[name] += 1
        self.last_bodies[name] = body
        try:
            request = json.loads(body or b"{}")
        except json.JSONDecodeError:
            await _json(send, 400, _error("Invalid JSON body", "invalid_request_error"))
            return
        b = self._effective(name)
        if b.latency_ms:
            await asyncio.sleep(b.latency_ms / 1000)
        if b.mode == "reset":
            await _reset(send, receive)
            return
        if b.mode == "hang":
            if await _wait_disconnect(receive, limit=600):
                self.abandoned[name] += 1
            return
        messages = request.get("messages")
        if b.reject_prefill and isinstance(messages, list) and messages and _role(messages[-1]) == "assistant":
            await _json(send, 400, _error(_PREFILL, "invalid_request_error", b.error_code or "prefill_unsupported"))
            return
        if b.mode == "status" or (b.mode == "flaky" and self._flaky_fails(name, b.fail_rate)):
            payload = _error(f"Simulated {b.status} from {name}", "server_error", b.error_code or None)
            await _json(send, b.status, payload, retry_after=b.retry_after)
            return
        if b.mode == "context_length":
            payload = _error(
                _context_message(_count_tokens(messages)), "invalid_request_error", "context_length_exceeded"
            )
            payload["error"]["param"] = "messages"
            await _json(send, 400, payload)
            return
        if b.mode == "content_filter":
            payload = _error(_FILTERED, "invalid_request_error", b.error_code or "content_filter")
            payload["error"]["param"] = "prompt"
            await _json(send, 400, payload)
            return
        if b.mode == "close":
            await send({"type": "http.response.start", "status": 200, "headers": [*_JSON, (b"content-length", b"512")]})
            await send({"type": "http.response.body", "body": b'{"id": "trunc', "more_body": True})
            raise DropConnection
        model = str(request.get("model", "unknown"))
        prompt_tokens = _count_tokens(request.get("messages"))
        if request.get("stream"):
            await self._stream(name, model, prompt_tokens, b, request, receive, send)
            return
        text = f"Simulated reply from {name} for {model}."
        completion_tokens = len(text.split())
        if b.mode == "stall":
            await send({"type": "http.response.start", "status": 200, "headers": [*_JSON, (b"content-length", b"512")]})
            await self._hold(name, receive)
            return
        await _json(
            send,
            200,
            {
                "id": f"chatcmpl-sim-{self.requests[name]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": str(prompt_tokens), "completion_tokens": -1}
                if b.mode == "badusage"
                else {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
            first_byte_ms=b.first_token_ms,
        )

    async def _hold(self, name: str, receive: Receive) -> None:
        """Keep the socket open, sending nothing, until the client goes away."""
        if await _wait_disconnect(receive, limit=600):
            self.abandoned[name] += 1

    async def _stream(
        self,
        name: str,
        model: str,
        prompt_tokens: int,
        b: Behaviour,
        request: dict[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        if b.first_token_ms:
            await asyncio.sleep(b.first_token_ms / 1000)
        created = int(time.time())
        ident = f"chatcmpl-sim-{self.requests[name]}"
        # A prefilled answer (the last message is the assistant's) goes on after the words it already has.
        first = _prefilled_words(request.get("messages")) + 1
        words = 0
        for i in range(b.chunks):
            if 0 < i < first:
                continue
            if b.mode == "midstream" and i >= b.fail_after_chunks:
                raise DropConnection
            if b.mode == "stall" and i >= b.fail_after_chunks:
                await self._hold(name, receive)
                return
            if b.mode == "malformed" and i == b.fail_after_chunks:
                await send({"type": "http.response.body", "body": b"data: {not json\n\n", "more_body": True})
            delta = {"role": "assistant", "content": ""} if i == 0 else {"content": f"word{i} "}
            words += i > 0
            chunk = {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            }
            await send({"type": "http.response.body", "body": _sse(chunk), "more_body": True})
            gate = self.gates.get(name)
            if i == 0 and gate is not None:
                await asyncio.to_thread(gate.wait, 30)
            if b.chunk_delay_ms:
                await asyncio.sleep(b.chunk_delay_ms / 1000)
        if b.mode == "midstream":
            raise DropConnection
        final = {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        }
        tail = _sse(final)
        self.completed_streams[name] += 1
        if (request.get("stream_options") or {}).get("include_usage"):
            usage: Any = (
                []
                if b.mode == "badusage"
                else {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": words,
                    "total_tokens": prompt_tokens + words,
                }
            )
            tail += _sse(
                {
                    "id": ident,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        done = b"" if b.mode == "nodone" else b"data: [DONE]\n\n"
        await send({"type": "http.response.body", "body": tail + done, "more_body": False})

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
                except (ValueError, TypeError) as exc:
                    await _json(send, 400, _error(str(exc), "invalid_request_error"))
                    return
                await _json(send, 200, asdict(self.behaviours[name]))
                return
        await _json(send, 404, _error(f"No control route {method} {path}", "invalid_request_error"))


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
    return len(str(messages[-1].get("content") or "").split())


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
    return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict)) + 3


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
