"""The attempt loop at its edges: the gateway's own deadline shorter than the policy's, a stream whose answer is
whole when its upstream cuts or holds the connection, a continuation's id, error events (one of unknown type, one
with a null `error`, a content filter before the first token) and a Retry-After no float reads. Each test failed
before its fix (round twenty-eight's review)."""

import random
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson

from catalog.models import LlmModel, Provider
from gateway.app import GatewayApp
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from health.breaker.memory import MemoryEngine
from health.breaker.types import ConfigSet, Decision, ManualClock, Outcome
from tests.gateway.conftest import TEST_BREAKER
from tests.gateway.resilience_helpers import FAST, STREAM, Rig, VirtualTime, chunks, content, set_policy
from tests.servers import serve

# --- Helpers -------------------------------------------------------------------------------------------------


class RecordingEngine(MemoryEngine):
    """The memory engine, noting every granted decision and every recorded outcome."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.granted: list[tuple[str, str]] = []
        self.recorded: list[tuple[str, str]] = []

    def allow(self, provider: str, model: str) -> Decision:
        decision = super().allow(provider, model)
        if decision.allowed:
            self.granted.append((provider, "probe" if decision.probe else "closed"))
        return decision

    def record(self, decision: Decision, outcome: Outcome) -> None:
        if decision.allowed:
            self.recorded.append((decision.provider, outcome.label))
        super().record(decision, outcome)


Handler = Callable[[Any, Any, bytes], Awaitable[None]]


class Upstream:
    """A scriptable OpenAI-shaped upstream: `handlers[<provider>]` answers `/<provider>/v1/chat/completions`."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}
        self.calls: Counter[str] = Counter()
        self.gone: Counter[str] = Counter()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        name = scope["path"].strip("/").split("/")[0]
        self.calls[name] += 1
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await self.handlers[name](receive, send, body)


SSE = [(b"content-type", b"text/event-stream")]


def sse(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event) + b"\n\n"


def chunk(ident: str, delta: dict[str, Any], finish: str | None = None) -> bytes:
    return sse(
        {
            "id": ident,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    )


async def wait_disconnect(receive: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


@contextmanager
def rig2(world: Any, policy: dict[str, Any] | None, *, virtual: bool = True, **app_kwargs: Any) -> Iterator[Rig]:
    """tests.gateway.resilience_helpers.rig with a recording engine, and the gateway's own knobs."""
    set_policy(policy)
    clock = ManualClock()
    vt = VirtualTime()
    if virtual:
        world.sim.monotonic = vt.now
        app_kwargs.update(clock=vt.now, sleep=vt.sleep)
    engine = RecordingEngine(clock=clock, config=ConfigSet(default=TEST_BREAKER))
    sink = LogSink(flush_seconds=0.05)
    app = GatewayApp(
        config=ConfigHolder(), engine=engine, sink=sink, max_body=64 * 1024, rng=random.Random(7), **app_kwargs
    )
    with serve(app, lifespan=True) as url:
        yield Rig(url=url, app=app, clock=clock, time=vt, sink=sink, world=world)


def prefill(*models: str) -> None:
    for name in models:
        model = LlmModel.objects.get(name=name)
        model.capabilities = [*model.capabilities, "assistant_prefill"]
        model.save()


def point(provider: str, url: str) -> None:
    Provider.objects.filter(name=provider).update(base_url=f"{url}/{provider}/v1")


# --- The gateway's deadline, shorter than the policy's -------------------------------------------------------


def test_a_retry_never_starts_after_the_gateways_deadline(world):
    """GATEWAY_DEADLINE_SECONDS (0.5 s here) shorter than the policy's deadline (60 s): the planner only knows
    the policy's, schedules the 1 s Retry-After wait, and every attempt after it starts past the deadline."""
    with rig2(world, {**FAST, "max_retries": 1}, virtual=False, deadline_seconds=0.5) as r:
        r.fault("openai", mode="status", status=429, retry_after="1")
        response = r.post()
        engine = r.app.engine

    # What was recorded against which circuit, and which upstreams were really called.
    assert (engine.recorded, r.calls()) == ([("openai", "429"), ("backup", "200")], {"openai": 1, "backup": 1})
    assert response.status_code == 200


# --- A continuation's events carry the id the client saw ----------------------------------------------------


def test_a_continuation_carries_the_id_the_client_saw(world):
    prefill("mistral")
    with rig2(world, {**FAST, "max_retries": 0}) as r:
        r.stream()  # openai's call 1 (its id chatcmpl-sim-1); the next one is chatcmpl-sim-2
        # openai: only its role delta, then a cut (nothing delivered); backup: two words, then a cut.
        r.fault("openai", mode="midstream", fail_after_chunks=1)
        r.fault("backup", mode="midstream", fail_after_chunks=3)
        _, events = r.stream()

    parts = chunks(events)
    assert content(events) == "word1 word2 word3 word4 "
    assert r.calls() == {"openai": 2, "backup": 1, "third": 1}
    # Every chunk of one answer carries one id: the first delivered part's (backup's).
    assert [c["id"] for c in parts] == [parts[0]["id"]] * len(parts)


# --- An error event of unknown type is a server error ------------------------------------------------------


def test_an_error_event_of_unknown_type_is_a_server_error_and_moves_on(world):
    upstream = Upstream()

    async def error_event(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        await send({"type": "http.response.body", "body": sse({"error": {"message": "boom"}}), "more_body": False})

    upstream.handlers["openai"] = error_event
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, {**FAST, "max_retries": 1}) as r:
            response, _ = r.stream()
            log = r.log()

    assert response.status_code == 200
    # docs/resilience.md: `server_error` is "an error event of unknown type"; not retried on the same target.
    assert log.attempts[0]["class"] == "server_error"
    assert (upstream.calls["openai"], log.attempts[0]["next"]) == (1, "move_on")


# --- A complete stream whose upstream keeps the connection open after [DONE] ---------------------------------


async def done_then_hold(receive: Any, send: Any, body: bytes) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": SSE})
    events = [
        chunk("c1", {"role": "assistant", "content": ""}),
        chunk("c1", {"content": "hello"}),
        chunk("c1", {}, "stop"),
        b"data: [DONE]\n\n",
    ]
    await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
    await wait_disconnect(receive)  # the answer is whole; the connection just is not closed


def test_a_stream_complete_with_done_is_not_an_idle_timeout(world):
    upstream = Upstream()
    upstream.handlers["openai"] = done_then_hold
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, FAST) as r:
            _, events = r.stream()
            engine = r.app.engine
            log = r.log()

    assert content(events) == "hello"
    assert [a.get("error") for a in log.attempts] == [None]
    assert engine.recorded == [("openai", "200")]
    assert events[-1] == "[DONE]"


def test_default_path_a_stream_complete_with_done_is_not_a_timeout(world):
    upstream = Upstream()
    upstream.handlers["openai"] = done_then_hold
    with serve(upstream) as url:
        point("openai", url)
        Provider.objects.filter(name="openai").update(read_timeout=0.5)
        with rig2(world, None) as r:
            _, events = r.stream()
            engine = r.app.engine

    assert content(events) == "hello"
    # The answer was whole ([DONE] relayed): no timeout charged to the provider, no error after [DONE].
    assert engine.recorded == [("openai", "200")]
    assert events[-1] == "[DONE]"


# --- A cut after the finish reason: the answer is whole ------------------------------------------------------


def test_a_cut_after_the_finish_reason_is_not_continued(world):
    upstream = Upstream()

    async def finish_then_cut(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        events = [
            chunk("c1", {"role": "assistant", "content": ""}),
            chunk("c1", {"content": "hello"}),
            chunk("c1", {}, "stop"),
        ]
        await send({"type": "http.response.body", "body": b"".join(events), "more_body": True})
        raise RuntimeError("cut before the usage and [DONE]")  # uvicorn drops the connection

    upstream.handlers["openai"] = finish_then_cut
    prefill("claude")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, FAST) as r:
            _, events = r.stream()

    # The answer was finished (finish_reason relayed): nothing may follow it, and no other model is asked.
    assert (content(events), r.calls()) == ("hello", {})


# --- `"error": null` in an ordinary chunk is no error event -------------------------------------------------


def test_a_chunk_with_a_null_error_field_is_not_an_error_event(world):
    upstream = Upstream()

    async def null_error(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        events = [
            sse({**orjson.loads(c[6:]), "error": None})
            for c in (
                chunk("c1", {"role": "assistant", "content": ""}),
                chunk("c1", {"content": "hello"}),
                chunk("c1", {}, "stop"),
            )
        ]
        await send({"type": "http.response.body", "body": b"".join(events) + b"data: [DONE]\n\n", "more_body": False})

    upstream.handlers["openai"] = null_error
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, None) as r:
            _, off_events = r.stream()
        with rig2(world, FAST) as r:
            response, events = r.stream()

    assert content(off_events) == "hello"  # the default path relays it as the answer it is
    assert (response.headers["x-vidai-model"], response.headers["x-vidai-attempts"], upstream.calls["openai"]) == (
        "gpt-4o",
        "1",
        2,
    )
    assert content(events) == "hello"


# --- A Retry-After that `str.isdigit` accepts and float() does not --------------------------------------------


def test_retry_after_superscript_digit_is_unreadable_not_a_crash():
    from gateway.resilience import retry_after

    assert retry_after([(b"retry-after", b"\xb2")], 0.0) is None


def test_a_429_with_a_superscript_retry_after_moves_on(world):
    upstream = Upstream()

    async def limited(receive: Any, send: Any, body: bytes) -> None:
        payload = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}})
        headers = [(b"content-type", b"application/json"), (b"retry-after", b"\xb2")]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": payload})

    upstream.handlers["openai"] = limited
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, FAST) as r:
            response = r.post()
            engine = r.app.engine

    assert response.status_code == 200, response.text
    assert engine.granted.count(("openai", "closed")) == engine.recorded.count(("openai", "429"))


# --- A content-filter error event before the first token is the provider's own error -------------------------


def test_a_content_filter_error_event_is_the_providers_own_error(world):
    with rig2(world, None) as r:
        r.fault("openai", mode="error_event", fail_after_chunks=0, error_code="content_filter")
        off = r.post(STREAM)
    with rig2(world, FAST) as r:
        r.fault("openai", mode="error_event", fail_after_chunks=0, error_code="content_filter")
        on = r.post(STREAM)

    off_error = orjson.loads(off.text.split("data: ", 1)[1])["error"]
    assert (off.status_code, off_error["type"]) == (200, "content_filter")  # policy off: the provider's event
    # Policy on: the client gets the provider's own error as the policy-off path relays it (it got a gateway 502,
    # which OpenAI's SDKs retry by default, whose type and code no longer said it was a content filter).
    on_error = orjson.loads(on.text.split("data: ", 1)[1])["error"]
    assert (on.status_code, on_error["type"], on.text.count("data: ")) == (200, "content_filter", 1)


# --- A last line the upstream did not end (round twenty-nine) ------------------------------------------------


def test_a_last_event_without_its_line_end_completes_the_answer_with_the_policy_on(world):
    upstream = Upstream()

    async def unterminated_finish(receive: Any, send: Any, body: bytes) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        events = [chunk("c1", {"role": "assistant", "content": ""}), chunk("c1", {"content": "hello"})]
        # The finish event is the body's last bytes, with no line end after it, and no [DONE].
        last = chunk("c1", {}, "stop").rstrip(b"\n")
        await send({"type": "http.response.body", "body": b"".join(events) + last, "more_body": False})

    upstream.handlers["openai"] = unterminated_finish
    prefill("claude")
    with serve(upstream) as url:
        point("openai", url)
        with rig2(world, FAST) as r:
            response, events = r.stream()
            engine = r.app.engine
            log = r.log()

    # The finish event reached the client and made the answer whole: one attempt, no other model, no charge.
    finishes = [c["choices"][0]["finish_reason"] for c in chunks(events) if c.get("choices")]
    assert (content(events), finishes[-1], events[-1]) == ("hello", "stop", "[DONE]")
    assert (response.headers["x-vidai-attempts"], r.calls(), engine.recorded) == ("1", {}, [("openai", "200")])
    assert [a.get("error") for a in log.attempts] == [None]
