"""Two reference proxies for the streaming rows of bench/gateway.py: what any Python hop costs on this machine.

Each takes a streaming chat request, checks that its body is a JSON object naming a model and holding a list
of messages, sends it to one upstream URL over a kept-alive connection, and relays the answer chunk by chunk.
Nothing else: no keys, routing, breaker, usage, logs or attribution, and no error handling beyond closing the
connection. Their added time to first byte, against the upstream called directly, is the floor under the
gateway's own on the same machine and load:

- `callback`: asyncio protocols only (uvloop, httptools, orjson), no task per request, each step in the
  socket's callback. The least Python a proxy can run.
- `asgi`: an ASGI app under uvicorn with the gateway's own server protocol (gateway/server.py) and upstream
  transport (gateway/upstream/transport.py): one task per request, the body read with `receive()`, the
  chunks relayed with `send()`. The gateway's structure without the gateway's work.

    .venv/bin/python bench/reference_proxy.py callback|asgi --port 8100 \\
        --upstream http://127.0.0.1:8200/openai/v1/chat/completions

A GET of any path answers 200 (readiness). The upstream's answer goes to the client as a 200 event stream.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import httptools
import httpx
import orjson
import uvloop

# Run as a script, this file's folder comes first on the path, where bench/gateway.py would shadow the
# gateway package that the `asgi` kind imports.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_READY = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
_SSE = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]


def _checked(raw: bytes) -> None:
    """What every proxy of a chat API must know before it sends anything upstream."""
    payload = orjson.loads(raw)
    if not isinstance(payload, dict) or not isinstance(payload.get("model"), str):
        raise ValueError("a JSON object naming a model is required")
    if not isinstance(payload.get("messages"), list):
        raise ValueError("a list of messages is required")


class _Upstream:
    """The upstream's address and the request head every call sends it."""

    def __init__(self, url: str) -> None:
        parsed = httpx.URL(url)
        self.host, self.port = parsed.host, parsed.port or 80
        self.head = (
            f"POST {parsed.raw_path.decode()} HTTP/1.1\r\nHost: {parsed.netloc.decode()}\r\n"
            "Content-Type: application/json\r\nAuthorization: Bearer sk-reference\r\n"
        ).encode()

    def request(self, body: bytes) -> bytes:
        return self.head + b"Content-Length: %d\r\n\r\n" % len(body)


# -- callback: protocols only -------------------------------------------------------------------------------
class _UpstreamConnection(asyncio.Protocol):
    def __init__(self, idle: list[_UpstreamConnection]) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.idle = idle
        self.client: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # a stream connection's is a Transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self in self.idle:
            self.idle.remove(self)
        if self.client is not None:
            self.client.close()

    def on_headers_complete(self) -> None:
        assert self.client is not None
        self.client.write(_HEAD)

    def on_body(self, body: bytes) -> None:
        assert self.client is not None
        self.client.write(b"%x\r\n%s\r\n" % (len(body), body))

    def on_message_complete(self) -> None:
        assert self.client is not None
        self.client.write(b"0\r\n\r\n")
        self.client = None
        self.idle.append(self)


class _ClientConnection(asyncio.Protocol):
    def __init__(self, upstream: _Upstream, idle: list[_UpstreamConnection]) -> None:
        self.upstream = upstream
        self.idle = idle
        self.parser = httptools.HttpRequestParser(self)
        self.transport: asyncio.Transport | None = None
        self.body: list[bytes] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, ValueError):
            assert self.transport is not None
            self.transport.close()

    def on_message_begin(self) -> None:
        self.body = []

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        assert self.transport is not None
        if self.parser.get_method() != b"POST":
            self.transport.write(_READY)
            return
        body = b"".join(self.body)
        _checked(body)
        request = self.upstream.request(body)
        if self.idle:
            upstream = self.idle.pop()
            upstream.client = self.transport
            assert upstream.transport is not None
            upstream.transport.writelines((request, body))
        else:
            asyncio.get_running_loop().create_task(self._connect(request, body))

    async def _connect(self, request: bytes, body: bytes) -> None:
        loop = asyncio.get_running_loop()
        assert self.transport is not None
        try:
            _, upstream = await loop.create_connection(
                lambda: _UpstreamConnection(self.idle), self.upstream.host, self.upstream.port
            )
        except OSError:
            self.transport.close()  # the client sees its connection end, not a wait without end
            return
        upstream.client = self.transport
        assert upstream.transport is not None
        upstream.transport.writelines((request, body))


async def _serve_callback(port: int, upstream: _Upstream) -> None:
    idle: list[_UpstreamConnection] = []
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _ClientConnection(upstream, idle), "127.0.0.1", port)
    await server.serve_forever()


# -- asgi: the gateway's server protocol and upstream transport, none of its work ---------------------------
def asgi_app(upstream: _Upstream) -> Any:
    from gateway.upstream.transport import FastTransport, origin_of

    transport = FastTransport()
    origin = origin_of(httpx.URL(f"http://{upstream.host}:{upstream.port}"))

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        if scope["method"] != "POST":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})
            return
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        body = b"".join(parts)
        _checked(body)
        response = await transport.send_raw(
            origin, upstream.request(body), body=body, connect_timeout=10, read_timeout=60
        )
        await send({"type": "http.response.start", "status": 200, "headers": _SSE})
        async for chunk in response.body:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=("callback", "asgi"))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True, help="the chat completions URL to relay to")
    args = parser.parse_args()
    upstream = _Upstream(args.upstream)
    if args.kind == "callback":
        uvloop.run(_serve_callback(args.port, upstream))
        return
    import uvicorn

    from gateway.server import CorkedHttpToolsProtocol

    uvicorn.run(
        asgi_app(upstream),
        host="127.0.0.1",
        port=args.port,
        http=CorkedHttpToolsProtocol,  # the gateway's own protocol class
        loop="uvloop",
        ws="none",
        lifespan="on",
        access_log=False,
        log_level="warning",
        server_header=False,
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    main()
