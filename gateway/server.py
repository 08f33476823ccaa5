"""The gateway's HTTP protocol for uvicorn: httptools, with the writes of one event-loop turn sent together.

uvicorn writes a response's status line and headers when the app sends `http.response.start`, and the body
when it sends `http.response.body`: two writes, so two send() calls and two TCP segments for every small
JSON answer. Here the connection's transport keeps what is written during one turn of the event loop and
hands it to the real transport in one write at the end of that turn (`call_soon`). Nothing waits for more
data: a streamed response still goes out chunk by chunk, each at the end of the turn that produced it, and
closing the connection writes what is held first.

It also tells the app when a request's client goes away: each request's scope carries a list under
`scope["extensions"][DISCONNECT_HOOKS]`, and losing the connection mid-request calls what the app put there.
The app then needs no task of its own per request watching `receive()` for `http.disconnect`.

Used as `uvicorn --http gateway.server:CorkedHttpToolsProtocol` (see run_gateway).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from gateway.exchange import DISCONNECT_HOOKS


class CorkedTransport:
    """A transport that joins the writes of one loop turn into one write of the transport it wraps."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        held = self._held
        if not held:
            return
        self._held = []
        if self._transport.is_closing():
            return  # the peer is gone: uvicorn has marked the cycle disconnected
        self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(len(chunk) for chunk in self._held)

    def __getattr__(self, name: str) -> Any:
        # is_closing, get_extra_info, pause_reading, resume_reading, set_protocol, abort, ...
        return getattr(self._transport, name)


class CorkedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol writing through a CorkedTransport, calling disconnect hooks (see above)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(CorkedTransport(transport, self.loop))  # type: ignore[arg-type]

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
        extensions[DISCONNECT_HOOKS] = []  # the app appends callables taking no arguments
        super()._start_asgi_task(cycle, app)

    def connection_lost(self, exc: Exception | None) -> None:
        cycle = self.cycle
        super().connection_lost(exc)
        if cycle is not None and cycle.disconnected:  # lost before the response was complete
            extensions: dict[str, Any] = cycle.scope.get("extensions") or {}
            for hook in extensions.get(DISCONNECT_HOOKS, ()):
                hook()
