"""The default path's stream reading: how an SSE body may begin and end (CRLF, a comment first, `data:` without a
space, an `event:` line first, `retry:`, `[DONE]` cut across chunks, lone CR line ends)."""

from typing import Any

import orjson
import pytest

from tests.gateway.test_attempts_review import SSE, Upstream, point, rig2
from tests.servers import serve

STREAM_BODY = {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def ev(delta: dict[str, Any], finish: str | None = None, *, sep: bytes = b"data: ", nl: bytes = b"\n") -> bytes:
    body = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return sep + orjson.dumps(body) + nl + nl


def pieces(*parts: bytes) -> Any:
    async def handler(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return handler


CASES = {
    "crlf-comment": pieces(
        b": hi\r\n\r\n", ev({"content": "hi"}, nl=b"\r\n"), ev({}, "stop", nl=b"\r\n"), b"data: [DONE]\r\n\r\n"
    ),
    "no-space": pieces(ev({"content": "hi"}, sep=b"data:"), ev({}, None, sep=b"data:"), b"data:[DONE]\n\n"),
    "event-line": pieces(
        b"event: message\n" + ev({"content": "hi"}), b"event: message\n" + ev({}, None), b"data: [DONE]\n\n"
    ),
    "retry-first": pieces(b"retry: 3000\n\n", ev({"content": "hi"}), ev({}, None), b"data: [DO", b"NE]\n\n"),
    "done-split": pieces(ev({"content": "hi"}), b"data: [DO", b"NE]\n\n"),
    "dat-split": pieces(b"dat", b"a: " + ev({"content": "hi"})[6:], b"data: [DONE]\n\n"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_probe(world, case):
    upstream = Upstream()
    upstream.handlers["openai"] = CASES[case]
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response, _events = r.stream(STREAM_BODY)
            engine = r.app.engine
            log = r.log()
    assert response.status_code == 200
    assert (log.status, log.error_kind) == (200, ""), log.error_kind
    assert engine.recorded == [("openai", "200")]


def test_cr_only_stream_over_64k_ends_whole(world):
    """SSE allows a lone CR as the line end. Before 6f18532 `[DONE]` was found in the tail; now only as a
    `\\n`-ended line."""
    parts = [ev({"content": "x" * 1000}, nl=b"\r") for _ in range(80)]
    upstream = Upstream()
    upstream.handlers["openai"] = pieces(*parts, ev({}, None, nl=b"\r"), b"data: [DONE]\r\r")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            response, _ = r.stream(STREAM_BODY)
            engine = r.app.engine
            log = r.log()
    assert response.status_code == 200
    assert (log.status, log.error_kind) == (200, ""), log.error_kind
    assert engine.recorded == [("openai", "200")]
