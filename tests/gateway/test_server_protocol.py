"""The production HTTP protocol (gateway/server.py): one write per loop turn, nothing held longer."""

import asyncio
import socket
import threading
import time

import httpx

from gateway.server import CorkedHttpToolsProtocol, CorkedTransport
from tests.servers import run_async, serve


class _Recording:
    """The transport side the wrapper writes to: records every write()."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def get_extra_info(self, name: str, default=None):
        return ("127.0.0.1", 1) if name == "peername" else default


def test_writes_of_one_turn_go_out_as_one_write_at_its_end():
    async def scenario():
        real = _Recording()
        corked = CorkedTransport(real, asyncio.get_running_loop())
        corked.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
        corked.write(b"{}")
        during = list(real.writes)
        await asyncio.sleep(0)  # the end of this turn
        after_turn = list(real.writes)
        corked.write(b"next")
        await asyncio.sleep(0)
        return during, after_turn, real.writes, corked.get_extra_info("peername")

    during, after_turn, writes, peer = run_async(scenario())

    assert during == []
    assert after_turn == [b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"]
    assert writes == [after_turn[0], b"next"]
    assert peer == ("127.0.0.1", 1)  # everything else is the wrapped transport's


def test_close_writes_what_is_held_first_and_a_closed_peer_gets_nothing():
    async def scenario():
        loop = asyncio.get_running_loop()
        real = _Recording()
        corked = CorkedTransport(real, loop)
        corked.write(b"last words")
        corked.close()
        gone = _Recording()
        late = CorkedTransport(gone, loop)
        late.write(b"for nobody")
        gone.closed = True
        await asyncio.sleep(0)
        return real.writes, real.closed, gone.writes

    writes, closed, to_gone = run_async(scenario())

    assert (writes, closed, to_gone) == ([b"last words"], True, [])


GATE = threading.Event()


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        for part in (b"one ", b"two ", b"three"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
            # The test lets the next chunk go only once it has read this one.
            assert await asyncio.to_thread(GATE.wait, 10)
            GATE.clear()
        await send({"type": "http.response.body", "body": b""})
        return
    body = b'{"path": "' + scope["path"].encode() + b'"}'
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def test_keep_alive_requests_on_one_connection_are_each_answered_whole():
    with serve(_app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        with httpx.Client(base_url=url) as client:
            answers = [client.get(f"/r{i}") for i in range(20)]

    assert [a.json() for a in answers] == [{"path": f"/r{i}"} for i in range(20)]
    assert {a.headers["content-length"] for a in answers} == {"15", "16"}


def test_a_streamed_chunk_is_not_held_for_the_next():
    GATE.clear()
    with serve(_app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\n\r\n")
            received = b""
            chunks = []
            # Each chunk must arrive while the app is still waiting on the gate (it has not sent the next).
            for expected in (b"one ", b"two ", b"three"):
                while expected not in received:
                    data = sock.recv(65536)
                    assert data, "connection closed early"
                    received += data
                chunks.append(expected)
                GATE.set()
            while not received.endswith(b"0\r\n\r\n"):
                received += sock.recv(65536)

    assert chunks == [b"one ", b"two ", b"three"]
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")


def test_disconnect_hooks_run_only_for_a_request_still_unanswered():
    """Each request's scope carries the hook list; losing the connection calls it only while the response
    is incomplete (a client closing a keep-alive connection after its answer cancels nothing)."""
    calls: list[str] = []
    waiting = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        hooks = scope["extensions"]["controlplane.disconnect_hooks"]
        hooks.append(lambda: calls.append(scope["path"]))
        if scope["path"] == "/hang":
            waiting.set()
            await asyncio.Event().wait()  # never answered; uvicorn cancels it at shutdown
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as answered:
            answered.sendall(b"GET /answered HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answered.recv(4096).endswith(b"ok")
        with socket.create_connection(("127.0.0.1", port)) as hanging:
            hanging.sendall(b"GET /hang HTTP/1.1\r\nHost: x\r\n\r\n")
            assert waiting.wait(10)
        deadline = time.monotonic() + 10
        while "/hang" not in calls and time.monotonic() < deadline:  # the server thread sees the lost connection
            time.sleep(0.01)

    assert calls == ["/hang"]
