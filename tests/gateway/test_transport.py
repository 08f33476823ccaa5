"""The gateway's HTTP/1.1 transport over real sockets: reuse, framing, failures, httpx compatibility."""

import asyncio
import contextlib

import httpx
import pytest

from gateway.simulator import Simulator
from gateway.upstream.transport import FastTransport, origin_of
from tests.servers import run_async, serve

pytestmark = pytest.mark.db_independent

BODY = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@contextlib.asynccontextmanager
async def raw_server(handler):
    """A TCP server whose handler writes raw bytes, for framings uvicorn never produces."""
    connections = []

    async def on_connect(reader, writer):
        connections.append(writer)
        await handler(reader, writer)

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port, connections
    finally:
        server.close()
        for writer in connections:
            writer.close()


async def read_request(reader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(
        next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    )
    return head + await reader.readexactly(length)


def request(port: int, path: str = "/") -> tuple[tuple[str, str, int], bytes]:
    payload = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY
    return ("http", "127.0.0.1", port), payload


def test_httpx_client_over_the_transport_reuses_one_connection():
    sim = Simulator()
    with serve(sim) as url:

        async def run():
            transport = FastTransport()
            async with httpx.AsyncClient(transport=transport) as client:
                responses = [await client.post(f"{url}/openai/v1/chat/completions", content=BODY) for _ in range(3)]
                return responses, len(transport._all)

        responses, open_connections = run_async(run())

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert responses[0].json()["model"] == "m"
    assert open_connections == 1


def test_close_delimited_and_chunked_bodies_are_read_whole():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end")
        await writer.drain()
        writer.close()

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            first = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            chunked = await first.body.aread()
            second = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            closed = await second.body.aread()
            return chunked, closed

    assert run_async(run()) == (b"hello world", b"until the end")


def test_reused_connection_closed_by_the_server_is_retried_once():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        # Keep-alive was promised, but the server drops the idle connection before the next request.
        writer.close()

    async def run():
        async with raw_server(handler) as (port, connections):
            transport = FastTransport()
            origin, payload = request(port)
            first = await (await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)).body.aread()
            second = await (await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)).body.aread()
            return first, second, len(connections)

    first, second, connections = run_async(run())

    assert (first, second) == (b"ok", b"ok")
    assert connections == 2


def test_truncated_body_raises_and_the_connection_is_not_reused():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly part")
        await writer.drain()
        writer.close()

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            with pytest.raises(httpx.RemoteProtocolError):
                await response.body.aread()
            return transport._idle.get(origin, [])

    assert run_async(run()) == []


def test_silent_server_is_a_read_timeout_and_refused_port_a_connect_error():
    async def handler(reader, writer):
        await read_request(reader)
        await asyncio.sleep(10)

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            with pytest.raises(httpx.ReadTimeout):
                await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=0.2)
            with pytest.raises(httpx.ConnectError):
                await transport.send_raw(("http", "127.0.0.1", 9), payload, connect_timeout=2, read_timeout=0.2)

    run_async(run())


def test_origin_of_fills_default_ports():
    assert origin_of(httpx.URL("https://api.openai.com/v1")) == ("https", "api.openai.com", 443)
    assert origin_of(httpx.URL("http://sim:8001/x")) == ("http", "sim", 8001)


def test_informational_response_is_skipped_and_never_leaks_into_the_next_request():
    async def handler(reader, writer):
        for n in (1, 2):
            await read_request(reader)
            if n == 1:
                writer.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n")
            body = f"answer-for-#{n}".encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            first = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            first_body = await first.body.aread()
            second = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            return first.status, first_body, second.status, await second.body.aread()

    assert run_async(run()) == (200, b"answer-for-#1", 200, b"answer-for-#2")


def test_bytes_after_a_complete_response_retire_the_connection():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokSURPLUS")
        await writer.drain()
        await reader.read()  # keep the connection open until the client closes it

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            body = await response.body.aread()
            for _ in range(50):  # let the surplus bytes arrive; the outcome does not depend on their timing
                await asyncio.sleep(0)
            return body, transport._take_idle(origin)

    body, idle = run_async(run())

    assert body == b"ok"
    assert idle is None


def test_connections_per_origin_are_bounded():
    async def handler(reader, writer):
        await read_request(reader)
        await asyncio.sleep(5)

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport(max_connections_per_origin=1)
            origin, payload = request(port)
            first = asyncio.ensure_future(transport.send_raw(origin, payload, connect_timeout=2, read_timeout=5))
            await asyncio.sleep(0)  # one turn of the loop: the first request takes the only slot
            with pytest.raises(httpx.PoolTimeout):
                await transport.send_raw(origin, payload, connect_timeout=0.2, read_timeout=5)
            first.cancel()
            return len(transport._all)

    assert run_async(run()) <= 1


def test_one_connection_reads_responses_of_every_framing_in_turn():
    """The connection's one parser reads each keep-alive response after the last: a length, chunks, a 204,
    an error with a body, then a length again, all on the same socket."""
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nsec\r\n3\r\nond\r\n0\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nX-Kind: busy\r\n\r\nbusy",
        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfifth",
    ]

    async def handler(reader, writer):
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()

    async def run():
        async with raw_server(handler) as (port, connections):
            transport = FastTransport()
            origin, payload = request(port)
            seen = []
            for _ in answers:
                response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
                seen.append((response.status, dict(response.headers).get(b"X-Kind"), await response.body.aread()))
            return seen, len(connections)

    seen, connections = run_async(run())

    assert seen == [
        (200, None, b"first"),
        (200, None, b"second"),
        (204, None, b""),
        (503, b"busy", b"busy"),
        (200, None, b"fifth"),
    ]
    assert connections == 1


def test_a_body_that_stalls_is_a_read_timeout_and_the_connection_is_dropped():
    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")
        await writer.drain()
        await reader.read()  # never sends the rest

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=0.2)
            with pytest.raises(httpx.ReadTimeout):
                await response.body.aread()
            await response.body.aclose()
            return transport._take_idle(origin)

    assert run_async(run()) is None
