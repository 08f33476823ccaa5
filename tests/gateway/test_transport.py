"""The gateway's HTTP/1.1 transport over real sockets: reuse, framing, failures, httpx compatibility, and
the kinds the adapters turn its failures into."""

import asyncio
import contextlib

import httpx
import pytest

from gateway.simulator import Simulator
from gateway.snapshot import ProviderInfo
from gateway.upstream.anthropic import AnthropicAdapter
from gateway.upstream.base import UpstreamError
from gateway.upstream.openai import OpenAIAdapter
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


@pytest.mark.parametrize("status", [b"101 Switching Protocols", b"600 Beyond", b"099 Low"])
def test_a_status_that_is_no_final_response_fails_the_request(status):
    """A 101 nobody asked for, or three digits HTTP/1.1 does not define (the parser takes any): the upstream's
    answer is malformed, not a response to pass on (uvicorn could not even write a 600's status line)."""

    async def handler(reader, writer):
        await read_request(reader)
        writer.write(b"HTTP/1.1 " + status + b"\r\nContent-Length: 2\r\n\r\n{}")
        await writer.drain()
        await reader.read()

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            try:
                await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            except httpx.RemoteProtocolError as exc:
                return str(exc), transport._take_idle(origin)
            return "answered", None

    assert run_async(run()) == (f"Upstream answered with status {int(status[:3])}, not a final response.", None)


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


def test_a_second_response_in_the_same_read_leaves_the_first_intact_and_retires_the_connection():
    """A well-formed response that arrives in the same read as the complete one before it is never parsed into
    it (status, headers and body stay the first response's), and the connection is never pooled."""

    async def handler(reader, writer):
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nbusy"
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Second: yes\r\n\r\nstale"
        )
        await writer.drain()
        await reader.read()  # keep the connection open until the client closes it

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
            body = await response.body.aread()
            return response.status, response.headers, body, transport._take_idle(origin)

    status, headers, body, idle = run_async(run())

    assert (status, body) == (503, b"busy")
    assert headers == [(b"Content-Length", b"4")]
    assert idle is None


def test_too_many_headers_fail_the_call_even_when_the_body_ends_at_the_close():
    """Past the header limit the response is an error, also for a body delimited by the connection closing:
    the close this side makes on that error is not the end of the body, so no truncated 200 comes back.
    The adapter reports it as a connection error."""

    async def handler(reader, writer):
        await read_request(reader)
        head = b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-H%d: v\r\n" % i for i in range(250)) + b"\r\n"
        writer.write(head + b'{"partial":')
        await writer.drain()
        await reader.read()

    async def run():
        async with raw_server(handler) as (port, _):
            transport = FastTransport()
            origin, payload = request(port)
            with pytest.raises(httpx.RemoteProtocolError, match="too many headers"):
                response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
                await response.body.aread()
            provider = ProviderInfo(name="p", protocol="openai", base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
            with pytest.raises(UpstreamError) as caught:
                await OpenAIAdapter(provider, transport).chat(BODY, stream=False)
            return caught.value.kind

    assert run_async(run()) == "connection_error"


def test_a_body_closed_once_complete_returns_its_connection_to_the_pool():
    """aclose() after the last data chunk, before iterating to the chunked terminator, pools the connection
    when the whole response has arrived; a body closed with bytes left unread, or before its end, is not pooled."""
    answers = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nsec\r\n",  # its terminator never comes
    ]

    async def handler(reader, writer):
        for answer in answers:
            await read_request(reader)
            writer.write(answer)
            await writer.drain()
        await reader.read()

    async def first_chunk_then_close(transport, origin, payload):
        response = await transport.send_raw(origin, payload, connect_timeout=2, read_timeout=2)
        chunk = await response.body.__aiter__().__anext__()
        await response.body.aclose()
        return chunk

    async def run():
        async with raw_server(handler) as (port, connections):
            transport = FastTransport()
            origin, payload = request(port)
            seen = [await first_chunk_then_close(transport, origin, payload)]
            pooled_after_complete = transport._idle.get(origin, []).copy()
            seen.append(await first_chunk_then_close(transport, origin, payload))
            pooled_after_incomplete = transport._take_idle(origin)
            return seen, len(pooled_after_complete), pooled_after_incomplete, len(connections)

    seen, pooled_after_complete, pooled_after_incomplete, connections = run_async(run())

    assert seen == [b"first", b"sec"]
    assert (pooled_after_complete, pooled_after_incomplete, connections) == (1, None, 1)


ANTHROPIC_EVENTS = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"m","model":"c",'
    b'"usage":{"input_tokens":3,"output_tokens":0}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"hi"}}\n\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":1}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def test_a_streamed_anthropic_answer_read_to_message_stop_reuses_its_connection():
    """The Anthropic stream ends at message_stop, before the body iterator reaches the chunked terminator;
    the complete response's connection still goes back to the pool for the next call."""

    async def handler(reader, writer):
        for _ in range(3):
            await read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + b"%x\r\n" % len(ANTHROPIC_EVENTS)
                + ANTHROPIC_EVENTS
                + b"\r\n0\r\n\r\n"
            )
            await writer.drain()
        await reader.read()

    async def run():
        async with raw_server(handler) as (port, connections):
            provider = ProviderInfo(name="a", protocol="anthropic", base_url=f"http://127.0.0.1:{port}", api_key="k")
            adapter = AnthropicAdapter(provider, FastTransport())
            body = b'{"model":"c","stream":true,"messages":[{"role":"user","content":"hi"}]}'
            ends = []
            for _ in range(3):
                response = await adapter.chat(body, stream=True)
                ends.append(b"".join([chunk async for chunk in response.stream]).endswith(b"data: [DONE]\n\n"))
            return ends, len(connections)

    assert run_async(run()) == ([True, True, True], 1)


def test_waiting_for_a_busy_connection_cap_is_pool_full_not_a_provider_timeout():
    """Every connection the gateway allows to an upstream being in use is the gateway's own limit: the adapter
    raises kind "pool_full" naming the cap, not "timeout" (which the breaker counts against the provider)."""

    async def handler(reader, writer):
        await read_request(reader)
        await reader.read()

    async def run():
        async with raw_server(handler) as (port, _):
            provider = ProviderInfo(
                name="p", protocol="openai", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", connect_timeout=0.2
            )
            adapter = OpenAIAdapter(provider, FastTransport(max_connections_per_origin=1))
            busy = asyncio.ensure_future(adapter.chat(BODY, stream=False))
            await asyncio.sleep(0)  # one turn of the loop: the first call takes the only slot
            try:
                with pytest.raises(UpstreamError) as caught:
                    await adapter.chat(BODY, stream=False)
            finally:
                busy.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await busy
            return caught.value.kind, caught.value.message, caught.value.connect_timeout

    assert run_async(run()) == ("pool_full", "All 1 connections to p are in use; retry shortly.", False)
