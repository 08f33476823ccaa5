"""A lean HTTP/1.1 keep-alive transport on asyncio protocols and httptools.

Why: httpx's default transport (httpcore on anyio) costs about 1 ms of CPU per call on
this class of machine (measured through the gateway, see docs/decisions.md), more than the
whole gateway budget. The gateway's adapters call `send_raw()` with a pre-built request head,
skipping httpx's request and response models; httpx's exceptions are kept, and the class is
also an `httpx.AsyncBaseTransport`, so any httpx client can use it. The wire work is one
buffered write per request, a C parser for responses, and a LIFO pool of idle connections per
origin. It speaks only what upstream LLM APIs need: HTTP/1.1, Content-Length or chunked
responses, keep-alive, TLS.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import certifi
import httptools
import httpx

# Drop idle connections before typical servers do (uvicorn 5 s, nginx 75 s), so a reused
# connection is rarely one the server is closing at that moment.
DEFAULT_KEEPALIVE_EXPIRY = 4.0
# A reused keep-alive connection found closed this soon after the request was written is retried once
# (the server had closed it while idle): the body is kept this long, then dropped.
RETRY_WINDOW = 0.05
_HOP_BY_HOP = {b"host", b"connection", b"keep-alive", b"transfer-encoding", b"accept-encoding", b"content-length"}
MAX_HEADERS = 200


class _StopParsing(Exception):
    """Raised from a parser callback to end `feed_data` at once (httptools wraps it in HttpParserCallbackError)."""


class _Connection(asyncio.Protocol):
    """One TCP connection; carries one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.error: Exception | None = None
        self._waiter: asyncio.Future[None] | None = None
        self.on_close: Any = None
        self.write_paused = False  # the transport's state, across requests
        # One parser per connection: it reads a keep-alive connection's responses one after another. A
        # connection is reused only after a complete response, so each request starts it between messages.
        self.parser = httptools.HttpResponseParser(self)
        self.reset()

    def reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.headers_done = False
        self.informational = False
        self.complete = False
        self.keep_alive = False
        self.delimited = False  # Content-Length or chunked: the body end is known
        self.received_any = False
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.paused = False
        self.idle_since = 0.0

    # -- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream connection's is a Transport

    def data_received(self, data: bytes) -> None:
        self.received_any = True
        if self.complete:
            # Bytes after the final response: this connection can never be trusted for another request.
            self.keep_alive = False
            self.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            if self.complete:
                # Bytes after the final response in the same read (on_message_begin stopped the parser, or
                # they were not HTTP): the response stays as it was; the connection is retired.
                self.keep_alive = False
            elif self.error is None:
                self.error = httpx.RemoteProtocolError(f"Malformed response from upstream: {exc}")
            self.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        by_peer = not self.closed  # close() marks a close this side initiated (an error, an abandoned body)
        self.closed = True
        if self.on_close is not None:
            self.on_close(self)
        if (
            by_peer
            and exc is None
            and self.error is None
            and self.headers_done
            and not self.complete
            and not self.delimited
        ):
            self.complete = True  # a body delimited by the connection closing (the peer's clean FIN, not a reset)
        elif not self.complete and self.error is None:
            self.error = httpx.RemoteProtocolError("Server disconnected without sending a complete response.")
        self._wake()

    def pause_writing(self) -> None:  # asyncio buffers what the kernel did not take, past its high-water mark
        self.write_paused = True

    def resume_writing(self) -> None:  # the buffer is below its low-water mark: the body is (nearly) all written
        self.write_paused = False
        self._wake()

    # -- httptools callbacks ----------------------------------------------------------------
    def on_message_begin(self) -> None:
        if self.complete:
            # A second message after the final response, in the same read: stop before it touches the first.
            raise _StopParsing

    def on_header(self, name: bytes, value: bytes) -> None:
        if len(self.headers) >= MAX_HEADERS:
            self.error = httpx.RemoteProtocolError("Upstream sent too many headers.")
            raise _StopParsing  # data_received closes the connection; nothing after this is parsed
        lower = name.lower()
        if lower == b"content-length" or (lower == b"transfer-encoding" and b"chunked" in value.lower()):
            self.delimited = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200 and status != 101:
            self.informational = True  # e.g. 103 Early Hints: the final response follows
            return
        if status > 599 or status < 200:
            # Three digits no HTTP/1.1 response has (the parser takes any), or a switch of protocols nobody asked
            # for: no final answer a client could be given.
            self.error = httpx.RemoteProtocolError(f"Upstream answered with status {status}, not a final response.")
            raise _StopParsing  # data_received closes the connection
        self.status = status
        self.headers_done = True
        if self.status in (204, 304):
            self.delimited = True

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        if self.buffered > 1 << 20 and not self.paused and self.transport is not None:
            # A slow client: stop reading from the upstream until the relay catches up.
            self.transport.pause_reading()
            self.paused = True

    def on_message_complete(self) -> None:
        if self.informational:
            self.informational = False
            self.headers.clear()
            self.delimited = False
            return
        self.complete = True
        self.keep_alive = self.parser.should_keep_alive()

    # -- used by the transport ------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def wait(self, timeout: float | None) -> None:
        """Wait for more parser progress (or the end), at most `timeout` seconds.

        The timer fails the waiter itself (no task cancellation to undo): one timer handle per wait.
        """
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        timer = None if timeout is None else loop.call_later(timeout, _expire, waiter)
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    async def wait_for(self, timeout: float) -> bool:
        """Wait for parser progress at most `timeout` seconds; False if none came."""
        try:
            await self.wait(timeout)
        except httpx.ReadTimeout:
            return False
        return True

    def take_chunk(self) -> bytes:
        chunk = self.chunks.popleft()
        self.buffered -= len(chunk)
        if self.paused and self.buffered < 1 << 18 and self.transport is not None:
            self.transport.resume_reading()
            self.paused = False
        return chunk

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


def _expire(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_exception(httpx.ReadTimeout("Timed out waiting for the upstream."))


class RequestBody:
    """A request body handed to the transport, which holds the only reference and drops it once written.

    `sent()` drops it and calls `on_sent` (once): the transport calls it when the bytes are in the
    kernel (asyncio's write buffer below its high-water mark) and no retry can need them again, the
    caller when the call failed or ended. `len()` is the body's length, even after it was dropped.
    """

    __slots__ = ("_length", "_on_sent", "data")

    def __init__(self, data: bytes, *, on_sent: Any = None) -> None:
        self.data = data
        self._length = len(data)
        self._on_sent = on_sent

    def __len__(self) -> int:
        return self._length

    @property
    def held(self) -> bool:
        return self._on_sent is not None or bool(self.data)

    def sent(self) -> None:
        self.data = b""
        on_sent, self._on_sent = self._on_sent, None
        if on_sent is not None:
            on_sent()


class _Body(httpx.AsyncByteStream):
    """The response body as it arrives; returns the connection to the pool when read to the end, or when
    closed once the whole response has arrived and been taken.

    Iterating raises httpx.ReadTimeout / httpx.RemoteProtocolError on failures.
    """

    def __init__(
        self,
        transport: FastTransport,
        key: tuple[str, str, int],
        conn: _Connection,
        read_timeout: float | None,
        on_done: Any = None,
    ) -> None:
        self._on_done = on_done
        self._transport = transport
        self._key = key
        self._conn = conn
        self._read_timeout = read_timeout
        self._released = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        conn = self._conn
        # Stops once released: after aclose() the connection may be pooled and carry another request.
        while not self._released:
            if conn.chunks:
                yield conn.take_chunk()
                continue
            if conn.error is not None:  # before `complete`: a parser error is never a clean end
                self._release()
                raise conn.error
            if conn.complete:
                self._release()
                return
            if conn.closed:
                self._release()
                raise httpx.RemoteProtocolError("Upstream closed the connection mid-body.")
            await conn.wait(self._read_timeout)

    async def aread(self, limit: int = 64 * 1024 * 1024) -> bytes:
        parts: list[bytes] = []
        size = 0
        async for chunk in self:
            size += len(chunk)
            if size > limit:
                await self.aclose()
                raise httpx.RemoteProtocolError(f"Upstream response larger than {limit // (1024 * 1024)} MiB.")
            parts.append(chunk)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _done(self) -> None:
        on_done, self._on_done = self._on_done, None
        if on_done is not None:
            on_done()

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._done()
        conn = self._conn
        if conn.complete and conn.keep_alive and not conn.closed and conn.error is None:
            self._transport._put_idle(self._key, conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        if self._released:
            return
        if self._conn.complete and not self._conn.chunks:
            # The whole response arrived and was taken (e.g. a stream ended at its last event, before the
            # chunked terminator was iterated): _release() pools it if it is clean and keep-alive.
            self._release()
            return
        # Not read to the end: the connection's state is unknown, so it cannot be reused.
        self._released = True
        self._conn.close()
        self._done()


class RawResponse:
    """Status, headers and the body stream of one upstream response (no httpx models on the hot path)."""

    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: list[tuple[bytes, bytes]], body: _Body) -> None:
        self.status = status
        self.headers = headers
        self.body = body


Origin = tuple[str, str, int]


def origin_of(url: httpx.URL) -> Origin:
    return (url.scheme, url.host, url.port or (443 if url.scheme == "https" else 80))


class FastTransport(httpx.AsyncBaseTransport):
    def __init__(
        self,
        *,
        keepalive_expiry: float = DEFAULT_KEEPALIVE_EXPIRY,
        max_idle_per_origin: int = 256,
        max_connections_per_origin: int = 512,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._idle: dict[tuple[str, str, int], list[_Connection]] = {}
        # Bounds sockets per upstream, so a hanging provider cannot exhaust file descriptors.
        self._max_connections = max_connections_per_origin
        self._slots: dict[Origin, asyncio.Semaphore] = {}
        self._keepalive_expiry = keepalive_expiry
        self._max_idle = max_idle_per_origin
        self._ssl = ssl_context
        self._all: set[_Connection] = set()

    @property
    def max_connections_per_origin(self) -> int:
        return self._max_connections

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=certifi.where())
        return self._ssl

    def _put_idle(self, key: tuple[str, str, int], conn: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self._max_idle:
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    def _take_idle(self, key: tuple[str, str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if not conn.closed and now - conn.idle_since < self._keepalive_expiry:
                return conn
            conn.close()
        return None

    async def _connect(self, key: tuple[str, str, int], timeout: float | None) -> _Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                if scheme == "https":
                    _, conn = await loop.create_connection(
                        _Connection, host, port, ssl=self._ssl_context(), server_hostname=host
                    )
                else:
                    _, conn = await loop.create_connection(_Connection, host, port)
        except TimeoutError:
            raise httpx.ConnectTimeout("timed out connecting") from None
        except (OSError, ValueError, OverflowError) as exc:
            # The message reaches clients: name the failure, not the internal address.
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise httpx.ConnectError(f"could not connect ({reason})") from None
        conn.on_close = self._all.discard
        self._all.add(conn)
        return conn

    async def send_raw(
        self,
        origin: Origin,
        payload: bytes,
        *,
        body: bytes | RequestBody = b"",
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> RawResponse:
        """Write one complete HTTP/1.1 request (`payload`, then `body` if given) and return once the
        response head arrived. The two are written without being joined, so a large body is not copied.
        A RequestBody is dropped (and its `sent()` called) as soon as it is written and cannot be retried."""
        if not isinstance(body, RequestBody):
            body = RequestBody(body)
        slots = self._slots.get(origin)
        if slots is None:
            slots = self._slots[origin] = asyncio.Semaphore(self._max_connections)
        if slots.locked():
            try:
                async with asyncio.timeout(connect_timeout):
                    await slots.acquire()
            except TimeoutError:
                raise httpx.PoolTimeout("every connection to the upstream is busy") from None
        else:
            await slots.acquire()  # a free slot: no waiting, no timer
        try:
            return await self._send(origin, payload, body, slots, connect_timeout, read_timeout)
        except BaseException:
            slots.release()
            raise

    async def _send(
        self,
        origin: Origin,
        payload: bytes,
        body: RequestBody,
        slots: asyncio.Semaphore,
        connect_timeout: float | None,
        read_timeout: float | None,
    ) -> RawResponse:
        loop = asyncio.get_running_loop()
        for attempt in (0, 1):
            conn = self._take_idle(origin)
            reused = conn is not None
            if conn is None:
                conn = await self._connect(origin, connect_timeout)
            conn.reset()
            assert conn.transport is not None
            sent_at = loop.time()
            try:
                if body.data:
                    conn.transport.writelines((payload, body.data))
                else:
                    conn.transport.write(payload)
                while not conn.headers_done:
                    if conn.error is not None or conn.closed:
                        raise conn.error or httpx.RemoteProtocolError("Upstream closed the connection.")
                    if body.held and not conn.write_paused:
                        # Written (what asyncio still buffers is under its high-water mark). Kept only while a
                        # retry is possible: a reused connection, nothing heard yet, within the window.
                        window = RETRY_WINDOW - (loop.time() - sent_at)
                        if not reused or attempt or conn.received_any or window <= 0:
                            body.sent()
                        else:
                            await conn.wait_for(window)
                            continue
                    await conn.wait(read_timeout)
            except httpx.RemoteProtocolError:
                conn.close()
                # Retry once only when a reused keep-alive connection was found closed at once: the server
                # had closed it while idle. A close after the server had time to work could be a request it
                # processed, and replaying it would double the upstream's work and cost.
                retryable = reused and not conn.received_any and attempt == 0 and loop.time() - sent_at < RETRY_WINDOW
                if retryable and (body.data or not len(body)):
                    continue
                raise
            except BaseException:
                conn.close()
                raise
            return RawResponse(conn.status, conn.headers, _Body(self, origin, conn, read_timeout, slots.release))
        raise AssertionError("unreachable")  # pragma: no cover

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        """The httpx transport interface, so any httpx.AsyncClient can use this pool."""
        url = request.url
        timeouts: dict[str, Any] = request.extensions.get("timeout", {})
        body = request.content
        head = [f"{request.method} {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n".encode()]
        for name, value in request.headers.raw:
            if b"\r" in name + value or b"\n" in name + value:
                raise httpx.LocalProtocolError("Header names and values may not contain CR or LF.")
            if name.lower() not in _HOP_BY_HOP:
                head.append(name + b": " + value + b"\r\n")
        head.append(b"Content-Length: %d\r\n\r\n" % len(body))
        raw = await self.send_raw(
            origin_of(url),
            b"".join(head) + body,
            connect_timeout=timeouts.get("connect"),
            read_timeout=timeouts.get("read"),
        )
        return httpx.Response(
            status_code=raw.status, headers=raw.headers, stream=raw.body, extensions={"http_version": b"HTTP/1.1"}
        )

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
