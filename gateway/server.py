"""The gateway's HTTP protocol for uvicorn: httptools, with the writes of one event-loop turn sent together.

uvicorn writes a response's status line and headers when the app sends `http.response.start`, and the body
when it sends `http.response.body`: two writes, so two send() calls and two TCP segments for every small
JSON answer. Here the connection's transport keeps what is written during one turn of the event loop and
hands it to the real transport in one write at the end of that turn (`call_soon`). Nothing waits for more
data: a streamed response still goes out chunk by chunk, each at the end of the turn that produced it, 64 KiB
held go out at once (so a slow client still pauses the app's sends), and closing the connection, or the client
ending its side of it, writes what is held first.

It also tells the app when a request's client goes away: each request's scope carries a list under
`scope["extensions"][DISCONNECT_HOOKS]`, and losing the connection mid-request calls what the app put there.
The app then needs no task of its own per request watching `receive()` for `http.disconnect`.

And it writes a response's head with fewer checks repeated. uvicorn checks every header's name and value with
its two regular expressions on every response; most of a gateway's headers recur (content-type, the served
model, `x-vidai-fallback: true`), so here each (name, value) pair that passed those same checks is kept with
its finished line, and a pair seen before costs a dictionary lookup. New pairs (a request id, a date) are
checked as uvicorn checks them. The rest (content-length, chunked, connection: close) is decided as uvicorn
decides it. uvicorn builds each cycle in `on_headers_complete`; this protocol runs that same function with
`RequestResponseCycle` bound to the subclass (`_building`), so every cycle is a CheckedLinesCycle from the
start. (Assigning `__class__` afterwards worked too, but left every cycle's attributes in a dict of their own,
which cost more than the checks saved.)

Used as `uvicorn --http gateway.server:CorkedHttpToolsProtocol` (see run_gateway).
"""

from __future__ import annotations

import asyncio
import contextlib
import types
from typing import Any

from uvicorn.protocols.http import httptools_impl
from uvicorn.protocols.http.httptools_impl import (
    HEADER_RE,
    HEADER_VALUE_RE,
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)

from gateway.exchange import DISCONNECT_HOOKS

# Held bytes reaching this many go to the transport at once, which then pauses the protocol past its high-water
# mark as it would without the cork: the app's next send waits for a slow client instead of piling up a whole
# response in one turn. uvicorn's (and uvloop's) high-water mark; a small response never reaches it.
_FLUSH_AT = 65536


class CorkedTransport:
    """A transport that joins the writes of one loop turn into one write of the transport it wraps."""

    __slots__ = ("_held", "_loop", "_size", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []
        self._size = 0  # len() of what is held

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        held = self._held
        if not held:
            self._loop.call_soon(self.flush)
        held.append(data)
        self._size += len(data)
        if self._size >= _FLUSH_AT:
            self.flush()

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        self._size = 0
        if self._transport.is_closing():
            return  # the peer is gone: uvicorn has marked the cycle disconnected
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + self._size

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, resume_reading, set_protocol, abort, ...
        return getattr(self._transport, name)


# Checked header lines: (name, value) -> (the line as written, the lowercased name when it is one that frames
# the response, else None). Bounded: emptied when full, so values that never recur (request ids) cannot grow it,
# and a line longer than _CHECKED_LINE is checked each time instead (an upstream's header can be large).
_FRAMING = frozenset((b"content-length", b"transfer-encoding", b"connection"))
_CHECKED_MAX = 4096
_CHECKED_LINE = 256
_checked: dict[tuple[bytes, bytes], tuple[bytes, bytes | None]] = {}


def _checked_line(pair: Any) -> tuple[bytes, bytes | None]:
    """The header's line and framing name, after uvicorn's own checks (RuntimeError as uvicorn raises it)."""
    name, value = pair
    if HEADER_RE.search(name):
        raise RuntimeError("Invalid HTTP header name.")
    if HEADER_VALUE_RE.search(value):
        raise RuntimeError("Invalid HTTP header value.")
    lowered = bytes(name.lower())  # a name without lower() fails here as it does in uvicorn
    checked = (b"".join((lowered, b": ", value, b"\r\n")), lowered if lowered in _FRAMING else None)
    if len(checked[0]) <= _CHECKED_LINE:
        if len(_checked) >= _CHECKED_MAX:
            _checked.clear()
        # A pair that is a list, or holds a bytearray or a writable memoryview, is not hashable: checked each time.
        with contextlib.suppress(TypeError, ValueError):
            _checked[pair] = checked
    return checked


class CheckedLinesCycle(RequestResponseCycle):
    """uvicorn's request-response cycle with its `send` on the common path written out here: the head from
    checked lines (see the module's docstring), a body as uvicorn frames it. A paused or lost connection, the
    access log on, or a message out of order goes to uvicorn's own `send`, which waits or raises as it does."""

    async def send(self, message: Any) -> None:
        if self.flow.write_paused or self.disconnected or self.access_log:
            await super().send(message)
        elif not self.response_started:
            if message["type"] != "http.response.start":
                await super().send(message)  # raises
            else:
                self._head(message)
        elif self.response_complete or message["type"] != "http.response.body":
            await super().send(message)  # raises
        else:
            self._body(message)

    def _head(self, message: Any) -> None:
        self.response_started = True
        self.waiting_for_100_continue = False
        status_code = message["status"]
        content = [STATUS_LINE[status_code]]
        has_connection_close = False
        for pair in (*self.default_headers, *message.get("headers", ())):
            try:
                checked = _checked.get(pair)
            except (TypeError, ValueError):  # not hashable (see _checked_line)
                checked = None
            line, framing = checked or _checked_line(pair)
            if framing is not None:
                value = pair[1]
                if framing == b"content-length":
                    if self.chunked_encoding is None:
                        self.expected_content_length = int(value.decode())
                        self.chunked_encoding = False
                elif framing == b"transfer-encoding":
                    if value.lower() == b"chunked":
                        self.expected_content_length = 0
                        self.chunked_encoding = True
                elif b"close" in [token.lower().strip() for token in value.split(b",")]:
                    self.keep_alive = False
                    has_connection_close = True
            content.append(line)
        if not self.keep_alive and not has_connection_close:
            content.append(b"connection: close\r\n")
        if self.chunked_encoding is None and self.scope["method"] != "HEAD" and status_code not in (204, 304):
            self.chunked_encoding = True  # neither content-length nor transfer-encoding given
            content.append(b"transfer-encoding: chunked\r\n")
        content.append(b"\r\n")
        self.transport.write(b"".join(content))

    def _body(self, message: Any) -> None:
        body = message.get("body", b"")
        more_body = message.get("more_body", False)
        if self.scope["method"] == "HEAD":
            self.expected_content_length = 0
        elif self.chunked_encoding:
            content = [b"%x\r\n" % len(body), body, b"\r\n"] if body else []
            if not more_body:
                content.append(b"0\r\n\r\n")
            self.transport.write(b"".join(content))
        else:
            if len(body) > self.expected_content_length:
                raise RuntimeError("Response content longer than Content-Length")
            self.expected_content_length -= len(body)
            self.transport.write(body)
        if not more_body:
            if self.expected_content_length != 0:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.message_event.set()
            if not self.keep_alive:
                self.transport.close()
            self.on_response()


def _building(cls: type, method: Any) -> Any:
    """`method` (a function of uvicorn's httptools module) as it is, but building `cls` where it builds a
    RequestResponseCycle: the same code object, run with a copy of that module's globals in which that one
    name is `cls`. The copy is taken once, at import; uvicorn does not rebind its module's names later."""
    namespace = {**vars(httptools_impl), "RequestResponseCycle": cls}
    built = types.FunctionType(method.__code__, namespace, method.__name__, method.__defaults__, method.__closure__)
    built.__qualname__, built.__doc__ = method.__qualname__, method.__doc__
    return built


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a deadline for a request to start.

    uvicorn times a connection out only while it is idle after a response (`timeout_keep_alive`), and any byte
    that arrives cancels that timer until the next response: a connection that never sends a request, sends half
    of one, or goes on sending the body of a request answered early (a 401 before its body was read) is held
    forever, a file descriptor and a protocol each, for a few bytes. Here such a connection is closed
    `head_timeout` seconds after it began waiting for a request (its start, or the first bytes after a response),
    however its bytes trickle in. A request whose app runs is not timed out here: its body read and its work have
    limits of their own. The common path pays one check per read; a timer is started only for a connection's
    first wait and for a read that left no request running.
    """

    head_timeout = 30.0
    # The request whose app runs. uvicorn's `cycle` is the request it parsed last, which may be a pipelined one
    # still waiting behind this one (never started: nothing to tell, nothing to cancel).
    _running: RequestResponseCycle | None = None
    _head_by: float | None = None  # loop time by which a request must be running (None: one is, or has been)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._guard()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)  # uvicorn cancels its keep-alive timer on any byte
        running = self._running
        if self.timeout_keep_alive_task is None and (running is None or running.response_complete):
            self._guard()  # the bytes started no request: the same deadline stands

    def _guard(self) -> None:
        if self.transport.is_closing():
            return
        if self._head_by is None:
            self._head_by = self.loop.time() + self.head_timeout
        # In uvicorn's keep-alive slot: its next read cancels it as it cancels its own, and its handler closes.
        self.timeout_keep_alive_task = self.loop.call_at(self._head_by, self.timeout_keep_alive_handler)

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._running = cycle
        self._head_by = None
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self._unset_keepalive_if_required()  # uvicorn leaves its timer armed after a reset


class QuietUpgradeHttpToolsProtocol(GuardedHttpToolsProtocol):
    """uvicorn's httptools protocol, except that a request asking to upgrade the connection is not a warning
    (and with the deadline for a request to start, above).

    Nothing served here speaks websockets (`--ws none`): such a request is answered as plain HTTP, as uvicorn
    does, but uvicorn also logs two warnings for each one, so any client, before its key is checked, could
    write two lines to the operator's log per request. They go to the debug level instead.
    (`make run` serves the console and the gateway with this class; run_gateway with the one below.)
    """

    def _unsupported_upgrade_warning(self) -> None:
        self.logger.debug("Upgrade request answered as plain HTTP: nothing here serves websockets.")


class CorkedHttpToolsProtocol(QuietUpgradeHttpToolsProtocol):
    """uvicorn's httptools protocol writing through a CorkedTransport, calling disconnect hooks, writing each
    response head from checked lines (see above), quiet about upgrade requests and with a deadline for a request
    to start."""

    on_headers_complete = _building(CheckedLinesCycle, HttpToolsProtocol.on_headers_complete)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]

    def eof_received(self) -> None:
        # The client has nothing more to send; the transport closes itself when this returns, as under uvicorn,
        # after writing what it was given: what this turn wrote is given to it first, not dropped as held.
        self.transport.flush()  # type: ignore[attr-defined]

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
        extensions[DISCONNECT_HOOKS] = []  # the app appends callables taking no arguments
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        cycle = self._running
        if cycle is not None and not cycle.response_complete:  # lost before the response was complete
            # uvicorn marks only its last parsed request (see `_running`): the running one's receive and send
            # learn it here.
            cycle.disconnected = True
            cycle.message_event.set()
            # Taken out of the scope: an app looking for the list from now on (its work not started yet) finds
            # none and watches `receive`, which answers http.disconnect at once; a hook added now would never run.
            extensions: dict[str, Any] = cycle.scope["extensions"]  # set in _start_asgi_task
            for hook in extensions.pop(DISCONNECT_HOOKS, ()):
                hook()
