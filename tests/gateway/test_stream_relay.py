"""How the attempt loop reads a stream it relays, whatever the upstream's chunks: the transport hands over
what each read brought, so an event can arrive cut anywhere (TCP, TLS or a proxy on the way re-chunk it).
These drive the two relays with chunk sequences chosen to cut events where the end-to-end tests cannot
choose; the rest of the path is covered over real sockets in test_requests.py and test_resilience_faults.py."""

import asyncio
import time
from typing import Any

import pytest

from gateway.attempts import _STATUS_OF_KIND, AttemptLoop, _outcome_of, _Progress, _Stream
from gateway.exchange import Exchange
from gateway.resilience import FailureClass, classify
from gateway.upstream.anthropic import MAX_EVENT_BYTES
from gateway.upstream.base import UpstreamError, UpstreamResponse
from health.breaker.types import Outcome
from tests.servers import run_async

pytestmark = pytest.mark.db_independent

CONTENT = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
STOP = b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
USAGE = b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}\n\n'
FILTERED = b'data: {"error":{"message":"flagged","type":"invalid_request_error","code":"content_filter"}}\n\n'
DONE = b"data: [DONE]\n\n"


def _attempt_loop() -> AttemptLoop:
    async def in_thread(raw: bytes, model: str) -> bytes:
        return raw

    return AttemptLoop(
        engine=lambda: None,  # type: ignore[arg-type, return-value]
        adapter=lambda provider: None,  # type: ignore[arg-type, return-value]
        renamed_now=lambda raw, model: raw,
        renamed_in_thread=in_thread,
        release_body=lambda call: None,
        log=lambda call: None,
        deadline_seconds=30,
    )


def _call() -> Exchange:
    return Exchange(request_id="r", started=time.perf_counter(), created_at=time.time(), stream=True)


async def _chunks(pieces: list[bytes]) -> Any:
    for piece in pieces:
        yield piece


def relay(pieces: list[bytes]) -> tuple[Exchange, list[Outcome], list[dict[str, Any]]]:
    """The default path's relay of `pieces`: the call, the breaker's reports and what the client was sent."""

    async def run() -> tuple[Exchange, list[Outcome], list[dict[str, Any]]]:
        call, sent, reports = _call(), [], []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        deadline = asyncio.get_running_loop().time() + 30
        response = UpstreamResponse(200, [], stream=_chunks(pieces))
        await _attempt_loop()._relay_stream(call, send, response, [], {}, time.perf_counter(), deadline, reports.append)
        return call, reports, sent

    return run_async(run())


def body_of(sent: list[dict[str, Any]]) -> bytes:
    return b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def cuts(event: bytes, *marks: bytes) -> list[int]:
    """Offsets that cut `event` near its ends, in its middle, and before and inside each of `marks`."""
    at = {1, 6, len(event) // 2, len(event) - 3, len(event) - 1}
    for mark in marks:
        at |= {event.index(mark), event.index(mark) + 3}
    return sorted(at)


@pytest.mark.parametrize("cut", cuts(USAGE, b'"usage"', b"11"))
def test_usage_cut_between_two_chunks_is_counted(cut):
    call, reports, sent = relay([CONTENT, STOP, USAGE[:cut], USAGE[cut:] + DONE])

    assert (call.tokens_in, call.tokens_out) == (11, 7)
    assert reports == [Outcome.of_status(200)]
    assert body_of(sent) == CONTENT + STOP + USAGE + DONE  # passed through unchanged


def test_usage_cut_into_many_chunks_is_counted():
    pieces = [USAGE[i : i + 5] for i in range(0, len(USAGE), 5)]

    call, _, _ = relay([CONTENT, STOP, *pieces, DONE])

    assert (call.tokens_in, call.tokens_out) == (11, 7)


def test_a_last_line_the_upstream_did_not_end_is_read():
    call, reports, sent = relay([CONTENT, STOP, USAGE.rstrip(b"\n")])

    assert (call.tokens_in, call.tokens_out) == (11, 7)
    assert reports == [Outcome.of_status(200)]
    assert body_of(sent).endswith(b"\n\n" + DONE)  # the gateway ends the open line, then closes the stream


@pytest.mark.parametrize("cut", cuts(STOP, b"finish_reason", b'"stop"'))
def test_a_finish_reason_cut_between_chunks_ends_a_stream_without_done_cleanly(cut):
    call, reports, sent = relay([CONTENT, STOP[:cut], STOP[cut:]])

    assert reports == [Outcome.of_status(200)]
    assert not call.error_kind
    assert body_of(sent) == CONTENT + STOP + DONE


@pytest.mark.parametrize("cut", cuts(FILTERED, b'"error"', b"content_filter"))
def test_a_content_filter_event_cut_between_chunks_is_the_clients_request_not_the_providers(cut):
    call, reports, sent = relay([CONTENT, FILTERED[:cut], FILTERED[cut:]])

    assert reports == [Outcome.of_status(400)]  # never counted against the provider
    assert call.error_kind == "error_event"
    assert body_of(sent) == CONTENT + FILTERED


def test_a_line_too_long_to_carry_passes_through_unread():
    huge = b'data: {"id":"c","choices":[{"delta":{"content":"' + b"x" * (70 * 1024) + b'"}}]}\n\n'

    call, reports, sent = relay([CONTENT, huge[:100], huge[100:], STOP, USAGE, DONE])

    assert body_of(sent) == CONTENT + huge + STOP + USAGE + DONE
    assert reports == [Outcome.of_status(200)]
    assert (call.tokens_in, call.tokens_out) == (11, 7)  # the lines after it are read again


@pytest.mark.parametrize("pieces", [[], [b""]], ids=["no-body", "empty-chunk"])
def test_a_200_stream_that_ends_before_any_event_is_an_incomplete_answer(pieces):
    call, reports, sent = relay(pieces)

    assert reports == [Outcome.connection_error()]
    assert call.status == 502
    assert call.error_kind == "stream_incomplete"
    start = next(m for m in sent if m["type"] == "http.response.start")
    assert start["status"] == 502  # nothing was committed: a plain error, never a 200 with [DONE]
    assert b"stream_incomplete" in body_of(sent)
    assert b"[DONE]" not in body_of(sent)


def test_a_deadline_that_passes_while_the_client_reads_is_not_the_providers():
    """The client stops reading after the first chunk; the provider has already sent its answer."""
    stalled = asyncio.Event()

    async def run() -> tuple[Exchange, list[Outcome]]:
        call, reports = _call(), []

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body" and not stalled.is_set():
                stalled.set()
                await asyncio.Event().wait()  # a client that stops taking the bytes

        loop = asyncio.get_running_loop()
        response = UpstreamResponse(200, [], stream=_chunks([CONTENT, STOP, DONE]))
        relay = _attempt_loop()._relay_stream(
            call, send, response, [], {}, time.perf_counter(), loop.time() + 0.05, reports.append
        )
        await relay
        return call, reports

    call, reports = run_async(run())

    assert stalled.is_set()
    assert reports == [Outcome.cancelled()]
    assert call.error_kind == "stream_interrupted"


def test_a_deadline_that_passes_while_the_upstream_is_silent_is_the_providers():
    async def silent() -> Any:
        yield CONTENT
        await asyncio.Event().wait()
        yield STOP  # never reached

    async def run() -> list[Outcome]:
        reports: list[Outcome] = []

        async def send(message: dict[str, Any]) -> None:
            return None

        loop = asyncio.get_running_loop()
        response = UpstreamResponse(200, [], stream=silent())
        await _attempt_loop()._relay_stream(
            _call(), send, response, [], {}, time.perf_counter(), loop.time() + 0.05, reports.append
        )
        return reports

    assert run_async(run()) == [Outcome.timeout()]


# -- the resilience policy's relay, which parses every event ---------------------------------------------------


def relay_events(pieces: list[bytes], send: Any = None) -> tuple[list[dict[str, Any]], _Stream, _Progress]:
    async def run() -> tuple[list[dict[str, Any]], _Stream, _Progress]:
        sent: list[dict[str, Any]] = []

        async def record(message: dict[str, Any]) -> None:
            sent.append(message)
            if send is not None:
                await send(message, timer)

        stream, progress = _Stream(), _Progress()
        async with asyncio.timeout(30) as timer:
            await _attempt_loop()._relay(_call(), record, _chunks(pieces), [], stream, timer, 30.0, progress)
        return sent, stream, progress

    return run_async(run())


def test_an_event_cut_into_many_chunks_is_relayed_once_whole():
    pieces = [CONTENT[i : i + 7] for i in range(0, len(CONTENT), 7)]

    sent, stream, progress = relay_events([*pieces, STOP, DONE])

    assert body_of(sent) == CONTENT + STOP
    assert stream.text == ["hi"] and stream.finished and stream.done
    assert progress.malformed == 0


def test_an_event_larger_than_the_limit_fails_the_attempt():
    piece = b"x" * (256 * 1024)
    pieces = [CONTENT, b'data: {"id":"c","choices":[{"delta":{"content":"', *[piece] * 5]

    with pytest.raises(UpstreamError) as failed:
        relay_events(pieces)

    assert failed.value.kind == "connection_error"
    assert 4 * len(piece) <= MAX_EVENT_BYTES < 5 * len(piece)


def test_an_event_larger_than_the_limit_in_one_chunk_fails_the_attempt():
    line = b'data: {"id":"c","choices":[{"delta":{"content":"' + b"x" * MAX_EVENT_BYTES

    with pytest.raises(UpstreamError) as failed:
        relay_events([CONTENT + line])

    assert failed.value.kind == "connection_error"


def test_no_idle_time_runs_while_the_client_reads():
    """The idle timer measures the provider's silences: it stops while the relay waits for the client and
    starts again, a whole idle period, once the client has taken the bytes."""
    during: list[float | None] = []

    async def send(message: dict[str, Any], timer: asyncio.Timeout) -> None:
        if message["type"] == "http.response.body":
            during.append(timer.when())
            await asyncio.sleep(0)  # uvicorn's drain() yields to the loop here

    sent, stream, _ = relay_events([CONTENT, CONTENT, STOP, DONE], send)
    assert body_of(sent) == CONTENT + CONTENT + STOP

    assert during == [None, None, None]
    assert stream.finished


def test_a_send_the_client_never_finishes_leaves_the_attempt_marked_as_sending():
    """What `_call` reads to tell a deadline the client caused from one the provider did."""

    async def run() -> _Progress:
        progress = _Progress()

        async def send(message: dict[str, Any]) -> None:
            await asyncio.Event().wait()

        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):  # the request's deadline, as `_call` sets it
                async with asyncio.timeout(30) as timer:  # the first-token timer, then the idle timer
                    await _attempt_loop()._relay(
                        _call(), send, _chunks([CONTENT]), [], _Stream(), timer, 30.0, progress
                    )
        return progress

    assert run_async(run()).sending is True


def test_a_full_connection_pool_is_this_gateways_limit_not_the_providers():
    assert _outcome_of("pool_full") == Outcome.cancelled()
    assert classify(None, "pool_full", None) is FailureClass.OVERLOADED  # waited for, then moved on
    assert _STATUS_OF_KIND["pool_full"] == 503
    assert _outcome_of("timeout") == Outcome.timeout()


# -- an Anthropic client's stream, translated from the relayed OpenAI events -----------------------------------


def test_a_line_over_the_event_limit_is_dropped_for_an_anthropic_client_and_the_stream_goes_on():
    from gateway.clients import AnthropicClientSend

    async def run() -> tuple[bytes, list[int]]:
        out: list[bytes] = []
        held: list[int] = []

        async def send(message: dict[str, Any]) -> None:
            out.append(message.get("body", b""))

        client = AnthropicClientSend(send, model="claude")
        client.stream = True  # the request asked for a stream
        await client(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]}
        )
        giant = [b'data: {"choices":[{"delta":{"content":"'] + [b"x" * (256 * 1024)] * 6
        for piece in [CONTENT, *giant, b'"}}]}\n\n', CONTENT, STOP]:
            await client({"type": "http.response.body", "body": piece, "more_body": True})
            held.append(len(client._pending))
        await client({"type": "http.response.body", "body": DONE, "more_body": False})
        return b"".join(out), held

    body, held = run_async(run())

    assert max(held) <= MAX_EVENT_BYTES  # never more than one event's worth held
    assert body.count(b"event: content_block_delta") == 2  # the two events around the dropped line
    assert b"x" * 1024 not in body
    assert body.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')
