"""The deadline for a request to start (gateway/server.py, `GuardedHttpToolsProtocol`, under both the gateway's
protocol and the embedded server's). uvicorn's only timer on a connection is the keep-alive one, armed after a
response and cancelled by any byte that arrives: a connection that sent nothing, half a request head, or the rest
of a body answered early was held open forever. Each test sets a short deadline; a client trickling bytes faster
than that must still be cut off, and a request whose app runs longer than it must not be."""

import asyncio
import socket
import time

import pytest

from gateway.server import CorkedHttpToolsProtocol, QuietUpgradeHttpToolsProtocol
from tests.servers import serve

pytestmark = pytest.mark.db_independent

DEADLINE = 0.3


class _GatewayProtocol(CorkedHttpToolsProtocol):
    head_timeout = DEADLINE


class _EmbeddedProtocol(QuietUpgradeHttpToolsProtocol):
    head_timeout = DEADLINE


BOTH = pytest.mark.parametrize("protocol", [_GatewayProtocol, _EmbeddedProtocol], ids=["gateway", "embedded"])


async def _app(scope, receive, send):
    if scope["type"] != "http":
        return
    if scope["path"] == "/early":  # answered before its body is read, as a request with a wrong key is
        body = b'{"error":"invalid key"}'
    elif scope["path"] == "/slow":
        await asyncio.sleep(DEADLINE * 4)  # the app's own work outlasting the deadline
        body = b"done"
    else:
        while (await receive()).get("more_body"):
            pass
        body = b"ok"
    status = 401 if scope["path"] == "/early" else 200
    await send({"type": "http.response.start", "status": status, "headers": [(b"content-length", b"%d" % len(body))]})
    await send({"type": "http.response.body", "body": body})


def _connect(url: str) -> socket.socket:
    return socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=10)


def _response(sock: socket.socket) -> bytes:
    """One response with a content-length, read whole."""
    received = b""
    while b"\r\n\r\n" not in received:
        data = sock.recv(65536)
        assert data, f"closed before a response: {received!r}"
        received += data
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(
        next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1]
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head.split(b"\r\n")[0] + b" " + body


def _closed_while_trickling(sock: socket.socket, limit: float = 10.0) -> bool:
    """Send a byte every 50 ms, each well within the deadline, until the server closes the connection (True) or
    `limit` seconds pass (False). Each wait is for the server's close, bounded by the 50 ms pace."""
    sock.settimeout(0.05)
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            sock.sendall(b"x")
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return True
    return False


@BOTH
def test_a_connection_that_sends_nothing_is_closed(protocol):
    with serve(_app, http=protocol, loop="uvloop") as url, _connect(url) as sock:
        assert sock.recv(1) == b""  # closed by the server (the socket's 10 s timeout would raise instead)


@BOTH
def test_a_request_head_trickled_in_is_cut_off(protocol):
    with serve(_app, http=protocol, loop="uvloop") as url, _connect(url) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        assert _closed_while_trickling(sock)


@BOTH
def test_the_rest_of_a_body_answered_early_cannot_hold_the_connection(protocol):
    with serve(_app, http=protocol, loop="uvloop") as url, _connect(url) as sock:
        sock.sendall(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n{")
        answer = _response(sock)
        cut_off = _closed_while_trickling(sock)

    assert (answer, cut_off) == (b'HTTP/1.1 401 Unauthorized {"error":"invalid key"}', True)


@BOTH
def test_a_request_whose_app_outlasts_the_deadline_is_answered_and_the_connection_kept(protocol):
    with serve(_app, http=protocol, loop="uvloop") as url, _connect(url) as sock:
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        slow = _response(sock)
        sock.sendall(b"POST /next HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
        after = _response(sock)

    assert (slow, after) == (b"HTTP/1.1 200 OK done", b"HTTP/1.1 200 OK ok")


@BOTH
def test_a_request_head_split_across_reads_is_served(protocol):
    """The deadline runs from the head's first bytes, and a head that arrives within it is served as usual."""
    with serve(_app, http=protocol, loop="uvloop") as url, _connect(url) as sock:
        sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\n")
        sock.sendall(b"Content-Length: 2\r\n\r\n{}")
        answer = _response(sock)

    assert answer == b"HTTP/1.1 200 OK ok"
