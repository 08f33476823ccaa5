"""One chat request's state and the ASGI response helpers that app.py and attempts.py share."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gateway.snapshot import KeyInfo, Route, Target

JSON_HEADERS = [(b"content-type", b"application/json")]
# A server may put a list in scope["extensions"] under this name and call its callables when the client's
# connection is lost mid-request (gateway/server.py does, and then takes the list out of the scope); without it
# the app watches `receive` instead.
DISCONNECT_HOOKS = "controlplane.disconnect_hooks"
SSE_HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class ClientGone(Exception):
    """The client disconnected before it was answered."""


class Reject(Exception):
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
class Exchange:
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
    # The client's own form of a whole 200 answer, made from the parsed answer before its outcome is told (an
    # Anthropic client's translation): raises when the answer cannot be given to this client. None: as it came.
    shape: Callable[[dict[str, Any]], None] | None = None


class SendTracker:
    """Wraps ASGI send to know whether a response started and finished (for last-resort errors)."""

    __slots__ = ("finished", "send", "started")

    def __init__(self, send: Any) -> None:
        self.send = send
        self.started = False
        self.finished = False

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.started = True
            await self.send(message)
        else:
            await self.send(message)
            # Only once it went out: a body that failed to (an Anthropic client's translation, say) leaves the
            # response unfinished, for the last-resort error.
            if not message.get("more_body", False):
                self.finished = True


def ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


async def respond(
    send: Any,
    status: int,
    body: bytes,
    *,
    headers: list[tuple[bytes, bytes]] | None = None,
    extra: list[tuple[bytes, bytes]] | None = None,
) -> None:
    base = headers if headers else JSON_HEADERS
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [*base, *(extra or ()), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
