"""Hostile request bodies: structure limits before the parse, repeated keys, one body upstream, the body budget."""

import asyncio
import json
import socket
import threading
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import httpx
import orjson
import pytest

from gateway.app import GatewayApp
from gateway.bodies import BodyBudget, BodyError, BodyLimits, parse_body, structure, wide_numbers
from gateway.config import ConfigHolder
from gateway.logsink import LogSink
from health.breaker.factory import build_engine
from health.breaker.types import ConfigSet, ManualClock
from requestlogs.models import RequestLog
from tests.gateway.conftest import TEST_BREAKER, parsed_alive_during_stream
from tests.servers import run_async, serve, until

MIB = 1024 * 1024
SMALL = BodyLimits(max_messages=3, max_content_parts=2, max_tools=2, max_depth=8, max_values=200, max_string_chars=100)


def user(text="hi"):
    return {"role": "user", "content": text}


def nested(depth):
    value = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def gateway_app(**kwargs):
    return GatewayApp(
        config=ConfigHolder(),
        engine=build_engine(clock=ManualClock(), config=ConfigSet(default=TEST_BREAKER)),
        sink=LogSink(flush_seconds=0.05),
        **kwargs,
    )


def post_raw(url, secret, content, timeout=60):
    return httpx.post(
        f"{url}/v1/chat/completions",
        content=content,
        headers={"authorization": f"Bearer {secret}", "content-type": "application/json"},
        timeout=timeout,
    )


def object_keys(raw):
    """The keys of every object in a JSON text, as written (repeats included)."""
    objects = []
    json.loads(raw, object_pairs_hook=lambda items: objects.append([k for k, _ in items]) or dict(items))
    return objects


@pytest.mark.parametrize(
    ("body", "code", "param", "says"),
    [
        ({"messages": [user()] * 4}, "array_above_max_length", "messages", "maximum length 3"),
        (
            {"messages": [user(), {"role": "user", "content": [{"type": "text", "text": "a"}] * 3}]},
            "array_above_max_length",
            "messages[1].content",
            "maximum length 2",
        ),
        (
            {"messages": [user()], "tools": [{"type": "function", "function": {"name": "f"}}] * 3},
            "array_above_max_length",
            "tools",
            "maximum length 2",
        ),
        (
            {"messages": [{"role": "assistant", "tool_calls": [{"id": "c"}] * 3}, user()]},
            "array_above_max_length",
            "messages[0].tool_calls",
            "maximum length 2",
        ),
        ({"messages": [user()], "metadata": nested(8)}, "json_too_deep", "metadata.a.a.a.a.a.a.a", "8 levels"),
        ({"messages": [user("x" * 101)]}, "string_above_max_length", "messages[0].content", "maximum length 100"),
        ({"messages": [user()] * 60}, "too_many_json_values", None, "more than 200 JSON keys and values"),
    ],
    ids=["messages", "content-parts", "tools", "tool-calls", "depth", "string", "values"],
)
def test_each_limit_is_a_400_naming_the_parameter_and_nothing_goes_upstream(world, body, code, param, says):
    app = gateway_app(limits=SMALL)
    with serve(app, lifespan=True) as url:
        response = post_raw(url, world.secret, orjson.dumps({"model": "gpt-4o", **body}))
        assert app.sink.flush(timeout=10)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error", code, param)
    assert says in error["message"]
    assert world.sim.requests == {}
    row = RequestLog.objects.get()
    assert (row.status, row.error_kind, row.request_id) == (400, code, response.headers["x-vidai-request-id"])


def test_a_body_just_inside_every_limit_is_served(world):
    app = gateway_app(limits=SMALL)
    body = {
        "model": "gpt-4o",
        "messages": [user("x" * 100), {"role": "user", "content": [{"type": "text", "text": "a"}] * 2}, user()],
        "tools": [{"type": "function", "function": {"name": "f"}}] * 2,
        "metadata": nested(7),
    }
    with serve(app, lifespan=True) as url:
        response = post_raw(url, world.secret, orjson.dumps(body))

    assert response.status_code == 200
    assert orjson.loads(world.sim.last_bodies["openai"]) == body


def test_a_legitimate_maximal_request_passes_the_default_limits(world):
    """2,048 messages of ~4 KiB and 128 tools (~9 MiB): parsed in the worker thread, forwarded whole."""
    text = "word " * 800
    body = {
        "model": "gpt-4o",
        "messages": [user(text) for _ in range(2048)],
        "tools": [
            {"type": "function", "function": {"name": f"tool_{i}", "parameters": {"type": "object"}}}
            for i in range(128)
        ],
    }
    raw = orjson.dumps(body)
    assert len(raw) > BodyLimits().large_body * 30
    app = gateway_app()  # default limits and body size
    with serve(app, lifespan=True) as url:
        response = post_raw(url, world.secret, raw)

    assert response.status_code == 200
    assert response.json()["usage"]["prompt_tokens"] == 2048 * 800 + 3  # the simulator saw every message
    assert world.sim.last_bodies["openai"] == raw  # nothing repeated, model unchanged: the bytes as sent
    assert app.body_budget.free == app.body_budget.capacity


def test_a_huge_hostile_body_is_refused_before_it_is_parsed(world):
    """~3.5 million empty messages in 10 MiB: 400 without the 300+ MB the parse would allocate."""
    head = b'{"model":"gpt-4o","messages":['
    raw = head + b",".join([b"{}"] * ((10 * MIB - len(head) - 8) // 3)) + b"]}"
    app = gateway_app()
    with serve(app, lifespan=True) as url:
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            response = post_raw(url, world.secret, raw)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert app.sink.flush(timeout=10)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("too_many_json_values", None)
    assert world.sim.requests == {}
    assert RequestLog.objects.get().status == 400
    # The client's body, the gateway's copy and the pre-scan's transients: tens of MiB, not hundreds.
    print(f"hostile 10 MiB body: peak traced allocation {peak / MIB:.0f} MiB")
    assert peak < 80 * MIB


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b'{"model": "gpt-4o", "mod\\u0065l": "mistral", "messages": [{"role": "user", "content": "hi"}]}', "model"),
        (b'{"mod\\u0065l": "mistral", "model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}', "model"),
        (b'{"model": "mistral", "messages": [], "\\u006dessages": [{"role": "user", "content": "a"}]}', "messages"),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "a:b"}, '
            b'{"role": "user", "r\\u006fle": "system", "content": "hi"}]}',
            "messages[1].role",
        ),
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}], "n": 1, "n" : 2}', "n"),
        # The colon an escape puts in a string must not stand in for the repeated key's colon.
        (b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\\u003a"}], "n": 1, "n": 2}', "n"),
    ],
    ids=["escaped-last", "escaped-first", "escaped-messages", "nested", "spaced-colon", "escaped-colon"],
)
def test_a_repeated_key_is_a_400_naming_it_and_nothing_goes_upstream(gateway, world, raw, param):
    """However the repeat is spelt, the gateway refuses it: the bytes it forwards always mean what it checked."""
    response = post_raw(gateway.url, world.secret, raw)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("duplicate_key", param)
    assert world.sim.requests == {}


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "Note: a \\"b\\": c, d\\\\"}]}',
        b'{"model": "gpt-4o", "messages": [{"role": "user", "content": ":\\u003a:"}], "metadata": {"k:": "v"}}',
        b'{"model" : "gpt-4o", "messages" : [{"role" : "user", "content" : "hi"}]}',
    ],
    ids=["colons-and-escapes-in-strings", "escaped-colon", "spaced-colons"],
)
def test_colons_and_escapes_inside_strings_are_not_taken_for_repeated_keys(raw):
    assert parse_body(raw, BodyLimits())[0] == orjson.loads(raw)


def test_a_number_a_re_serialised_body_would_change_is_refused_on_a_route_that_renames(gateway, world):
    """The gpt-4o chain may send the body to another model, re-serialised: such numbers would not survive."""
    raw = b'{"model": "%s", "messages": [{"role": "user", "content": "12345678901234567890123"}], "seed": %s}'

    wide = post_raw(gateway.url, world.secret, raw % (b"gpt-4o", b"18446744073709551616"))
    tiny = post_raw(gateway.url, world.secret, raw % (b"gpt-4o", b"1.5e-400"))
    plain = post_raw(gateway.url, world.secret, raw % (b"gpt-4o", b"42"))
    direct = post_raw(gateway.url, world.secret, raw % (b"claude", b"18446744073709551616"))  # no chain: as sent

    assert [r.status_code for r in (wide, tiny, plain, direct)] == [400, 400, 200, 200]
    assert wide.json()["error"]["code"] == tiny.json()["error"]["code"] == "number_out_of_range"
    assert world.sim.last_bodies["backup"] == raw % (b"claude", b"18446744073709551616")


@pytest.mark.parametrize(
    ("raw", "wide"),
    [
        (b'{"n": 18446744073709551616}', True),  # 2**64: a float to orjson
        (b'{"n": -9223372036854775809}', True),  # -2**63 - 1, nineteen digits: a float to orjson too
        (b'{"n": 1.5e-400}', True),
        (b'{"n": 9223372036854775807, "m": -922337203685477580}', False),  # integers orjson reads exactly
        (b'{"s": "-9223372036854775809 and 18446744073709551616"}', False),  # in a string: kept as written
    ],
)
def test_wide_numbers_finds_every_number_orjson_reads_as_another(raw, wide):
    assert wide_numbers(raw) is wide


@pytest.mark.parametrize(
    "raw",
    [
        b'{"a": "x\\"{[,:", "b": ["\\\\", {}], "c": "\\\\\\"}"}',
        b'{"s": "\\u0022,,,", "t": [1, 2.5, true, null, "]"]}',
        b'[{"a": {}}, [], "", {"b": [[[]]]}]',
    ],
)
def test_structure_counts_what_the_parser_builds(raw):
    """Keys and values outside strings, escapes included: the same counts as walking the parsed value."""

    def walk(value):
        if isinstance(value, dict):
            values, keys = 1, len(value)
            for item in value.values():
                item_values, item_keys = walk(item)
                values, keys = values + 1 + item_values, keys + item_keys
            return values, keys
        if isinstance(value, list):
            counts = [walk(item) for item in value]
            return 1 + sum(v for v, _ in counts), sum(k for _, k in counts)
        return 1, 0

    values, keys = walk(orjson.loads(raw))
    counted_values, counted_keys = structure(raw, 1000)
    empty = raw.count(b"{}") + raw.count(b"[]")
    assert (counted_values - empty, counted_keys) == (values, keys)


def test_large_bodies_wait_for_room_in_the_budget_and_time_out_with_503(world):
    """A slow client holding the worker's whole body budget makes the next large body wait, then 503."""
    limits = replace(BodyLimits(), large_body=1024)
    app = gateway_app(limits=limits, max_body=64 * 1024, body_buffer=64 * 1024, body_wait_seconds=0.2)
    body = orjson.dumps({"model": "gpt-4o", "messages": [user("x" * 4000)]})
    with serve(app, lifespan=True) as url:
        host, port = url.removeprefix("http://").split(":")
        slow = socket.create_connection((host, int(port)))
        slow.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {world.secret}\r\nContent-Length: {63 * 1024}\r\n\r\n".encode()
            + b'{"model": "gpt-4o"'
        )
        try:
            until(lambda: app.body_budget.free < app.body_budget.capacity, 10, "the slow client to hold room")
            waited = post_raw(url, world.secret, body)
        finally:
            slow.close()
        until(lambda: app.body_budget.free == app.body_budget.capacity, 10, "the slow client's room to come back")
        served = post_raw(url, world.secret, body)
        assert app.sink.flush(timeout=10)

    assert waited.status_code == 503
    assert waited.json()["error"]["code"] == "overloaded"
    assert served.status_code == 200
    assert app.body_budget.free == app.body_budget.capacity
    assert RequestLog.objects.filter(status=503, error_kind="overloaded").count() == 1


def test_budget_is_first_come_first_served_and_a_waiter_that_gives_up_leaves_no_trace():
    async def scenario():
        budget = BodyBudget(10)
        first = await budget.acquire(8, 1)
        order = []

        async def take(size, label):
            await budget.acquire(size, 5)
            order.append(label)

        big = asyncio.ensure_future(take(6, "big"))
        await asyncio.sleep(0)
        small = asyncio.ensure_future(take(2, "small"))  # fits now, but queues behind "big"
        await asyncio.sleep(0)
        with pytest.raises(TimeoutError):
            await budget.acquire(9, 0.01)
        assert order == []
        budget.release(first)
        await asyncio.gather(big, small)
        return order, budget.free

    order, free = run_async(scenario())

    assert order == ["big", "small"]
    assert free == 2


def test_a_deep_value_beside_a_wide_list_under_a_long_key_is_found_without_spelling_every_path(world):
    """70 KB: 70 levels under one key, 20,000 siblings under a 10,000-character key. Spelling each sibling's
    path took 195 MiB; the 400 now costs what the parse does."""
    deep = {}
    for _ in range(70):
        deep = {"a": deep}
    raw = orjson.dumps({"model": "gpt-4o", "a": deep, "k" * 10_000: [{}] * 20_000})
    app = gateway_app()
    with serve(app, lifespan=True) as url:
        tracemalloc.start()
        try:
            response = post_raw(url, world.secret, raw)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("json_too_deep", ".".join(["a"] * 64))
    print(f"deep-beside-wide 70 KB body: peak traced allocation {peak / MIB:.1f} MiB")
    assert peak < 20 * MIB
    assert world.sim.requests == {}


def test_a_long_key_is_cut_in_the_reported_path():
    raw = orjson.dumps({"model": "m", "k" * 90: {"x": "y" * 101}})

    with pytest.raises(BodyError) as caught:
        parse_body(raw, SMALL)

    assert caught.value.param == "k" * 64 + "....x"


def test_a_cancelled_waiter_whose_turn_came_passes_the_room_on():
    """release() runs between a waiter's cancellation and its wake-up: no ValueError, the next waiter gets it."""

    async def scenario():
        budget = BodyBudget(10)
        held = await budget.acquire(10, 1)
        cancelled = asyncio.ensure_future(budget.acquire(6, 5))
        await asyncio.sleep(0)
        nxt = asyncio.ensure_future(budget.acquire(6, 5))
        await asyncio.sleep(0)
        cancelled.cancel()  # its future is cancelled now, the task resumes later
        budget.release(held)  # _wake skips (drops) the cancelled entry and grants the next one
        outcome = await asyncio.gather(cancelled, return_exceptions=True)
        granted = await nxt
        return type(outcome[0]), granted, budget.free

    kind, granted, free = run_async(scenario())

    assert kind is asyncio.CancelledError
    assert (granted, free) == (6, 4)


def chunked(raw, pieces=4):
    step = max(1, len(raw) // pieces)
    return iter([raw[i : i + step] for i in range(0, len(raw), step)])


@pytest.mark.parametrize("kind", ["chunked-small", "declared-large"])
def test_bodies_give_their_room_back_once_read_or_written_not_when_the_upstream_answers(world, kind):
    """The worker's body budget fits one maximal body. Small bodies sent chunked (no Content-Length) used to
    hold a maximal reservation, large ones theirs, until the slow upstream answered: the rest waited, then 503."""
    from gateway.simulator import Behaviour

    # A waiter gives up after 1.5 s, half the upstream's 3 s: under the old rule every waiter past the first
    # would; under this one all the reads, one after another, have 1.5 s (0.3 s was once too short in a
    # fresh-clone run of the whole suite; the cause was not reproduced).
    world.sim.behaviours["openai"] = Behaviour(latency_ms=3000)
    limits = replace(BodyLimits(), large_body=1024)
    app = gateway_app(limits=limits, max_body=64 * 1024, body_buffer=64 * 1024, body_wait_seconds=1.5)
    if kind == "chunked-small":
        count, body = 8, orjson.dumps({"model": "gpt-4o", "messages": [user("hi")]})
    else:
        count, body = 3, orjson.dumps({"model": "gpt-4o", "messages": [user("x" * 40_000)]})
    with serve(app, lifespan=True) as url:
        with ThreadPoolExecutor(count) as pool:
            content = (lambda: chunked(body)) if kind == "chunked-small" else (lambda: body)
            responses = list(pool.map(lambda _: post_raw(url, world.secret, content()), range(count)))
        assert app.sink.flush(timeout=10)

    assert [r.status_code for r in responses] == [200] * count
    assert world.sim.requests["openai"] == count
    assert app.body_budget.free == app.body_budget.capacity


def test_a_client_that_trickles_its_body_gets_a_408_and_its_room_back(world):
    app = gateway_app(body_read_timeout=0.5)
    with serve(app, lifespan=True) as url:
        host, port = url.removeprefix("http://").split(":")
        slow = socket.create_connection((host, int(port)))
        slow.settimeout(20)
        try:
            slow.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Authorization: Bearer {world.secret}\r\nContent-Length: {600 * 1024}\r\n\r\n".encode()
                + b'{"model": "gpt-4o"'
            )
            answer = b""
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                data = slow.recv(65536)  # the gateway answers by itself; before the fix it waited for ever
                if not data:
                    break
                answer += data
        finally:
            slow.close()
        until(lambda: app.body_budget.free == app.body_budget.capacity, 10, "the body budget to be whole again")
        assert app.sink.flush(timeout=10)

    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408")
    error = orjson.loads(payload)["error"]
    assert (error["type"], error["code"]) == ("invalid_request_error", "request_timeout")
    assert world.sim.requests == {}
    assert RequestLog.objects.get().status == 408


def test_the_parsed_body_is_gone_while_the_upstream_streams(world):
    """Only the raw bytes travel past validation, and those go once written: during a held stream nothing the
    parse allocated (gateway/bodies.py) is alive."""
    body = orjson.dumps(
        {"model": "claude", "stream": True, "messages": [user(f"message {i} " + "w " * 300) for i in range(2048)]}
    )
    gate = world.sim.gates["backup"] = threading.Event()
    with serve(gateway_app(), lifespan=True) as url:
        response, first, rest, alive = parsed_alive_during_stream(
            url, gate, {"authorization": f"Bearer {world.secret}"}, content=body
        )

    assert response.status_code == 200
    assert first and rest.rstrip().endswith(b"[DONE]")
    print(f"parsed body alive during the stream: {alive / MIB:.2f} MiB (the body: {len(body) / MIB:.1f} MiB)")
    assert alive < MIB


@pytest.mark.parametrize("slice_bytes", [1, 2, 3, 5, 8, 64])
def test_structure_counted_in_slices_is_the_same_count(slice_bytes):
    """Slices never split an escape and carry whether they start inside a string."""
    raw = (
        b'{"a": "x\\"{[,:", "b": ["\\\\", {}], "c": "\\\\\\"}", "d": "\\\\\\\\", "e": [1, "\\"\\"", {"f": ":"}],'
        b' "g": "\\u0022,,,", "h": {"i": [[], {}], "j": "\\\\"}}'
    )
    expected = structure(raw, 1000)

    assert structure(raw, 1000, slice_bytes=slice_bytes) == expected
    assert expected[1] == sum(len(keys) for keys in object_keys(raw))
