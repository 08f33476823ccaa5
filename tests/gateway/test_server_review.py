"""The production HTTP protocol (gateway/server.py) and the app's use of it, where they departed from uvicorn's
own protocol: a pipelined request's client leaving, a client leaving before the work registered its hook,
back-pressure within one loop turn, a client half-closing, and an upstream status HTTP/1.1 cannot carry.

Where uvicorn's own protocol is the reference, a test runs against it too: what it does is what ours must do."""

import asyncio
import contextlib
import hashlib
import re
import socket
import struct
import threading
import time

import httpx
import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.exchange import DISCONNECT_HOOKS, ClientGone, Exchange
from gateway.server import CorkedHttpToolsProtocol
from gateway.snapshot import KeyInfo, ModelInfo, ProviderInfo, Snapshot
from health.breaker.factory import build_engine
from health.breaker.types import ConfigSet, ManualClock
from routing.resolution import principal_scopes
from tests.servers import serve, until, within

pytestmark = pytest.mark.db_independent

BOTH = pytest.mark.parametrize("protocol", [HttpToolsProtocol, CorkedHttpToolsProtocol], ids=["uvicorn", "ours"])


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


def _read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while data := sock.recv(65536):
        received += data
    return received


def test_a_pipelined_requests_running_predecessor_is_told_its_client_left():
    """Two requests in one packet: the second waits behind the first (reading paused meanwhile, so the client's
    leaving shows only when a write to it fails). It must reach the first, which is streaming: uvicorn marks
    only the request it parsed last, which never started, and the first would stream on to its end for nobody.
    """
    calls: list[str] = []
    streaming = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        left = asyncio.Event()

        def hook() -> None:
            calls.append(scope["path"])
            left.set()

        scope["extensions"][DISCONNECT_HOOKS].append(hook)
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    while not left.is_set():
                        await send({"type": "http.response.body", "body": b"data: more\n\n", "more_body": True})
                        streaming.set()
                        await asyncio.sleep(0.01)  # an upstream's pace, not a wait for the test
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        client = socket.create_connection(("127.0.0.1", _port(url)), timeout=10)
        client.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        assert streaming.wait(10)
        assert client.recv(65536).startswith(b"HTTP/1.1 200 OK\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset: gone at once
        client.close()
        told = within(lambda: calls)

    assert (told, calls) == (True, ["/stream"])


def test_a_client_gone_before_the_work_registers_its_hook_still_cancels_the_work():
    """The client leaves after its body was read but before `_proxy_watching_disconnect` put its hook in the
    list (a large body is parsed in a worker thread meanwhile): the upstream call must still be cancelled,
    not run to its deadline for nobody."""
    gateway = GatewayApp(config=ConfigHolder())
    upstream_started = threading.Event()

    class _HangingAttempts:  # the attempt loop's place: an upstream call that never ends by itself
        async def run(self, call, snap, send):
            upstream_started.set()
            await asyncio.Event().wait()

    gateway.attempts = _HangingAttempts()  # type: ignore[assignment]
    outcome: list[str] = []
    body_read = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        left = asyncio.Event()
        scope["extensions"][DISCONNECT_HOOKS].append(left.set)  # tells this test the server saw the client go
        while (await receive()).get("more_body"):
            pass
        body_read.set()
        call = Exchange(request_id="r", started=time.perf_counter(), created_at=time.time())
        try:
            async with asyncio.timeout(10):
                await left.wait()  # the client is gone: only now does the work start
                await gateway._proxy_watching_disconnect(call, None, scope, receive, send)  # type: ignore[arg-type]
        except ClientGone:
            outcome.append("cancelled")
        except TimeoutError:
            outcome.append("ran on for nobody")

    with serve(app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        with socket.create_connection(("127.0.0.1", _port(url))) as client:
            client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
            assert body_read.wait(10)
        until(lambda: outcome, 20, "the work to end")

    assert (upstream_started.is_set(), outcome) == (True, ["cancelled"])


@BOTH
def test_the_writes_of_one_loop_turn_still_wait_for_a_slow_client(protocol):
    """An app sending chunk after chunk without anything else to await (each send returns at once): once the
    transport holds more than its high-water mark, the next send waits for the client, as uvicorn's does.
    Held for the end of the turn instead, every chunk would pile up in memory however slowly the client reads."""
    chunk = b"x" * (1 << 20)
    peaks: list[int] = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        transport = send.__self__.transport
        peak = 0
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % (16 << 20))]})
        for _ in range(16):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
            peak = max(peak, transport.get_write_buffer_size())
        await send({"type": "http.response.body", "body": b""})
        peaks.append(peak)

    with serve(app, http=protocol, loop="uvloop") as url:
        with httpx.stream("GET", f"{url}/big", timeout=30) as response:
            size = sum(len(part) for part in response.iter_raw())

    assert size == 16 << 20
    assert peaks[0] < 4 << 20  # a chunk or two past the high-water mark, not the whole response


@BOTH
def test_a_response_written_before_the_clients_half_close_is_delivered(protocol):
    """The client sends its request and then shuts its side down (legal: it has nothing more to send). uvicorn
    closes the connection on that end of input, after writing what the app wrote before it: a response
    written in the turn before the EOF is read must not be lost for having been held to the turn's end."""
    written = threading.Event()
    shut = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})
        written.set()
        # Blocks the loop (test only) until the client's FIN is there: the loop reads it before its next turn.
        assert shut.wait(10)

    with serve(app, http=protocol, loop="uvloop") as url:
        with socket.create_connection(("127.0.0.1", _port(url)), timeout=10) as client:
            client.sendall(b"GET /now HTTP/1.1\r\nHost: x\r\n\r\n")
            assert written.wait(10)
            client.shutdown(socket.SHUT_WR)
            shut.set()
            received = _read_until_closed(client)

    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.endswith(b"\r\n\r\nok")


@contextlib.contextmanager
def _raw_upstream(reply: bytes):
    """An upstream on a plain socket answering every request with `reply`, whatever HTTP allows."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    stop = threading.Event()

    def serve_forever() -> None:
        while True:
            conn, _ = listener.accept()
            if stop.is_set():
                conn.close()
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data and (part := conn.recv(65536)):
                    data += part
                head, _, body = data.partition(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: *(\d+)", head)
                while length and len(body) < int(length.group(1)) and (part := conn.recv(65536)):
                    body += part
                conn.sendall(reply)

    thread = threading.Thread(target=serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        socket.create_connection(("127.0.0.1", port)).close()  # wakes accept()
        thread.join(timeout=10)
        listener.close()


def test_an_upstream_status_http_cannot_carry_is_answered_as_a_bad_gateway():
    """An upstream answering `HTTP/1.1 600 ...` (its parser takes any three digits): passed on as it is, the
    head cannot be written (uvicorn knows status lines 100 to 599 only), and the client got no answer at all,
    just a closed connection. A gateway answers such an upstream with a 502 in the client's error shape."""
    secret = "cp-review-secret"
    key = KeyInfo(
        1,
        "cp-review",
        1,
        None,
        None,
        None,
        principal_scopes(key_id=1, user_id=1, team_id=None, application_id=None, agent_id=None),
    )
    reply = b"HTTP/1.1 600 Beyond\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}"
    with _raw_upstream(reply) as upstream:
        config = ConfigHolder()
        config.current = Snapshot(
            version=1,
            keys={hashlib.sha256(secret.encode()).hexdigest(): key},
            providers={"odd": ProviderInfo("odd", "openai", f"{upstream}/v1", "sk-odd", 2.0, 5.0)},
            models={"gpt-4o": ModelInfo("gpt-4o", "odd", frozenset(), 1.0, 1.0)},
        )
        app = GatewayApp(config=config, engine=build_engine(clock=ManualClock(), config=ConfigSet()))
        with serve(app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
            try:
                response = httpx.post(
                    f"{url}/v1/chat/completions",
                    json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]},
                    headers={"authorization": f"Bearer {secret}"},
                    timeout=10,
                )
                answer: object = (response.status_code, response.json()["error"]["type"])
            except httpx.RemoteProtocolError as exc:
                answer = f"no answer: {exc}"

    # The client's own error shape, as for any malformed upstream answer.
    assert answer == (502, "upstream_error")
