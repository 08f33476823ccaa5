"""The production HTTP protocol (gateway/server.py): one write per loop turn, nothing held longer."""

import asyncio
import logging
import socket
import threading
import time

import httpx
import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from gateway.server import CorkedHttpToolsProtocol, CorkedTransport, QuietUpgradeHttpToolsProtocol
from tests.servers import WEBSOCKET_UPGRADE, run_async, serve

pytestmark = pytest.mark.db_independent


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


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.mark.parametrize(
    ("protocol", "warned"),
    [(CorkedHttpToolsProtocol, False), (QuietUpgradeHttpToolsProtocol, False), (HttpToolsProtocol, True)],
)
def test_an_upgrade_request_is_answered_as_http_and_warns_only_under_uvicorns_own_protocol(protocol, warned):
    # No websocket library is installed and nothing here serves websockets: uvicorn answers such a request as
    # plain HTTP and logs two warnings for it, which any client could repeat on every request. Ours do not.
    records = _Records()
    logger = logging.getLogger("uvicorn.error")
    with serve(_app, http=protocol, loop="uvloop") as url:
        level = logger.level  # the server set it to warning
        logger.setLevel(logging.DEBUG)
        logger.addHandler(records)
        try:
            answer = httpx.get(f"{url}/up", headers=WEBSOCKET_UPGRADE, timeout=10)
        finally:
            logger.removeHandler(records)
            logger.setLevel(level)

    assert answer.json() == {"path": "/up"}
    said = [(r.levelno, r.getMessage()) for r in records.records if "upgrade request" in r.getMessage().lower()]
    assert said  # ours still say it, at the debug level
    assert any(levelno >= logging.WARNING for levelno, _ in said) is warned


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


def _cycle(cls, *, method="GET", keep_alive=True, default_headers=()):
    """A request-response cycle of `cls` writing to a recording transport (nothing else is touched by a head)."""
    from uvicorn.protocols.http.flow_control import FlowControl

    transport = _Recording()
    return cls(
        scope={"type": "http", "method": method},
        transport=transport,
        flow=FlowControl(transport),
        logger=None,
        access_logger=None,
        access_log=False,
        default_headers=list(default_headers),
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: None,
    )


def _head(cls, status, headers, **cycle):
    """(bytes written, framing state) after one `http.response.start`, or the error it raised."""

    async def scenario():
        c = _cycle(cls, **cycle)
        try:
            await c.send({"type": "http.response.start", "status": status, "headers": headers})
        except RuntimeError as exc:
            return RuntimeError, str(exc), c.response_started, c.transport.writes
        return c.transport.writes, c.chunked_encoding, c.expected_content_length, c.keep_alive

    return run_async(scenario())


HEADS = [
    (200, [(b"content-type", b"application/json"), (b"content-length", b"42")], {}),
    (200, [(b"Content-Type", b"text/event-stream"), (b"X-Vidai-Model", b"gpt-4o")], {}),  # no length: chunked
    (200, [(b"transfer-encoding", b"Chunked"), (b"content-length", b"5")], {}),
    (200, [(b"content-length", b"5"), (b"transfer-encoding", b"chunked")], {}),
    (200, [(b"transfer-encoding", b"gzip")], {}),
    (200, [(b"connection", b"keep-alive, Close"), (b"content-length", b"0")], {}),
    (200, [(b"content-length", b"2")], {"keep_alive": False}),
    (200, [(b"x-note", b"tab\tinside; fine: yes")], {"method": "HEAD"}),
    (204, [], {}),
    (304, [(b"etag", b'"v1"')], {"default_headers": [(b"date", b"Wed, 02 Dec 2026 06:00:00 GMT")]}),
    (503, [(b"retry-after", b"1"), (b"x-empty", b"")], {"default_headers": [(b"server", b"uvicorn")]}),
    (200, [(b"bad name", b"v")], {}),
    (200, [(b"bad:name", b"v")], {}),
    (200, [(b"x-ok", b"v"), (b"x: y", b"v")], {}),  # joined lines would read as a header "x" with value "y: v"
    (200, [(b"x-ok", b"v"), (b"x-split", b"a\r\nx-injected: 1")], {}),
    (200, [(b"x-nul", b"a\x00b")], {}),
    (200, [(b"x-del", b"a\x7fb")], {}),
    (200, [(b"x-\x01", b"v")], {}),
    (200, [(b"x-high", "caf\u00e9".encode())], {}),
    (200, [[b"x-as-list", b"v"], (bytearray(b"x-bytearray"), b"v"), (b"content-length", b"1")], {}),
    (200, [[b"bad name", b"v"]], {}),
    (200, [(b"x-ok", b"v"), (b"x-ok", b"v\r\nx-injected: 1")], {}),  # a name already checked, a value not
    (200, [(b"x-long", b"v" * 1000)], {}),
    (200, [(b"x-view", memoryview(bytearray(b"v"))), (b"x-view-bad", memoryview(bytearray(b"a\nb")))], {}),
]


def test_the_head_from_checked_lines_is_what_uvicorn_writes_and_refuses():
    """The same bytes, framing state and keep-alive as uvicorn's own cycle for every head above, and a
    RuntimeError for every header uvicorn refuses (a control character, a separator in a name, CR or LF in a
    value), whether the line was checked before or not."""
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from gateway import server
    from gateway.server import CheckedLinesCycle

    server._checked.clear()
    refused = 0
    for status, headers, cycle in HEADS * 2:  # the second time, from the lines kept the first time
        ours = _head(CheckedLinesCycle, status, headers, **cycle)
        theirs = _head(RequestResponseCycle, status, headers, **cycle)
        assert ours == theirs, (status, headers, cycle)
        refused += ours[0] is RuntimeError
    assert refused == 20
    assert (b"X-Vidai-Model", b"gpt-4o") in server._checked  # the second time came from the kept lines
    assert not any(name == b"x-long" for name, _ in server._checked)  # too long to keep


BODIES = [
    ([(b"content-length", b"5")], [(b"ab", True), (b"cde", False)], {}),
    ([(b"content-length", b"2")], [(b"abc", False)], {}),  # longer than declared
    ([(b"content-length", b"3")], [(b"ab", False)], {}),  # shorter
    ([], [(b"one", True), (b"", True), (b"two", False)], {}),  # chunked
    ([], [(b"", False)], {}),
    ([(b"transfer-encoding", b"chunked")], [(b"x" * 300, False)], {}),
    ([(b"content-length", b"10")], [(b"", False)], {"method": "HEAD"}),
    ([(b"content-length", b"1")], [(b"a", False), (b"b", False)], {}),  # after the end
    ([(b"content-length", b"2")], [(b"ok", False)], {"keep_alive": False}),
]


def _exchange(cls, headers, bodies, **cycle):
    """What a cycle of `cls` wrote and how it ended after a head and `bodies`, or the first error raised."""

    async def scenario():
        c = _cycle(cls, **cycle)
        responses: list[int] = []
        c.on_response = lambda: responses.append(1)
        out = []
        try:
            await c.send({"type": "http.response.start", "status": 200, "headers": headers})
            for body, more in bodies:
                await c.send({"type": "http.response.body", "body": body, "more_body": more})
        except RuntimeError as exc:
            out.append(str(exc))
        state = (c.response_complete, c.expected_content_length, c.message_event.is_set(), len(responses))
        return out, c.transport.writes, c.transport.closed, state

    return run_async(scenario())


def test_bodies_are_framed_and_refused_as_uvicorn_frames_and_refuses_them():
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from gateway.server import CheckedLinesCycle

    errors = 0
    for headers, bodies, cycle in BODIES:
        ours = _exchange(CheckedLinesCycle, headers, bodies, **cycle)
        assert ours == _exchange(RequestResponseCycle, headers, bodies, **cycle), (headers, bodies, cycle)
        errors += bool(ours[0])
    assert errors == 3


def test_a_body_before_the_head_is_refused_as_uvicorn_refuses_it():
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from gateway.server import CheckedLinesCycle

    async def scenario(cls):
        c = _cycle(cls)
        try:
            await c.send({"type": "http.response.body", "body": b"x"})
        except RuntimeError as exc:
            return str(exc), c.transport.writes
        return None, c.transport.writes

    ours = run_async(scenario(CheckedLinesCycle))
    assert ours == run_async(scenario(RequestResponseCycle))
    assert ours[0] is not None and "http.response.start" in ours[0]


def test_the_production_protocol_serves_through_the_checked_lines_cycle():
    seen = []

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        seen.append(type(send.__self__).__name__)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    with serve(app, http=CorkedHttpToolsProtocol, loop="uvloop") as url:
        with httpx.Client(base_url=url) as client:
            answers = [client.get("/") for _ in range(3)]

    assert [(a.status_code, a.text) for a in answers] == [(200, "ok")] * 3
    assert seen == ["CheckedLinesCycle"] * 3


def test_checked_lines_are_bounded_and_a_refused_header_is_never_kept():
    from gateway import server

    async def scenario():
        for i in range(server._CHECKED_MAX + 10):  # request ids: a value that never recurs
            c = _cycle(server.CheckedLinesCycle)
            await c.send({"type": "http.response.start", "status": 200, "headers": [(b"x-id", b"%d" % i)]})
        c = _cycle(server.CheckedLinesCycle)
        try:
            await c.send({"type": "http.response.start", "status": 200, "headers": [(b"x-bad", b"a\nb")]})
        except RuntimeError:
            pass
        return len(server._checked), (b"x-bad", b"a\nb") in server._checked, c.transport.writes

    size, kept, writes = run_async(scenario())

    assert 0 < size <= server._CHECKED_MAX
    assert (kept, writes) == (False, [])


def test_a_paused_or_lost_connection_and_messages_out_of_order_go_to_uvicorns_send():
    """Waiting for a paused transport, nothing written to a lost client, a second head or a head without
    headers: the same as uvicorn's own cycle."""
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

    from gateway.server import CheckedLinesCycle

    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    body = {"type": "http.response.body", "body": b"ok"}

    async def paused(cls):
        c = _cycle(cls)
        c.flow.pause_writing()
        sending = asyncio.ensure_future(c.send(start))
        await asyncio.sleep(0)
        waited = (sending.done(), list(c.transport.writes))
        c.flow.resume_writing()
        await sending
        await c.send(body)
        return waited, c.transport.writes

    async def lost(cls):
        c = _cycle(cls)
        c.disconnected = True
        await c.send(start)
        await c.send(body)
        return c.transport.writes

    async def out_of_order(cls):
        c = _cycle(cls)
        await c.send({"type": "http.response.start", "status": 204})  # no headers key
        try:
            await c.send(start)
        except RuntimeError as exc:
            return c.transport.writes, str(exc)
        return c.transport.writes, None

    for scenario in (paused, lost, out_of_order):
        ours = run_async(scenario(CheckedLinesCycle))
        assert ours == run_async(scenario(RequestResponseCycle)), scenario.__name__
    assert run_async(paused(CheckedLinesCycle))[0] == (False, [])
    assert run_async(lost(CheckedLinesCycle)) == []
    assert run_async(out_of_order(CheckedLinesCycle))[1] is not None
