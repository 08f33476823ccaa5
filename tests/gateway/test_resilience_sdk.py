"""The resilience policy as the official `openai` SDK sees it: a primary outage is one clean answer.

The other resilience tests read the gateway's bytes; these check that a real client library, which parses
every chunk and raises on an error event, gets nothing it would trip over. The SDK's own retries are off
(`max_retries=0`) so they can never hide a gateway failure, and every test also counts the upstream calls.
"""

from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from tests.gateway.resilience_helpers import FAST, WORDS, Rig, rig
from tests.gateway.test_resilience_faults import prefill

ON = FAST
OFF = None
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]


def client(r: Rig) -> openai.OpenAI:
    """An SDK client for the rig's gateway, with no retries of its own."""
    return openai.OpenAI(base_url=f"{r.url}/v1", api_key=r.world.secret, max_retries=0, timeout=30)


def complete(r: Rig) -> ChatCompletion:
    return client(r).chat.completions.create(model="gpt-4o", messages=MESSAGES)


def stream(r: Rig) -> list[ChatCompletionChunk]:
    """Every chunk of a streamed answer with usage; an error event would raise here."""
    with client(r).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    ) as chunks:
        return list(chunks)


def text(chunks: list[ChatCompletionChunk]) -> str:
    return "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)


def assert_one_clean_stream(chunks: list[ChatCompletionChunk]) -> None:
    """One answer: the whole text, one id, a final usage-only chunk, a finish reason."""
    assert text(chunks) == WORDS
    assert {chunk.id for chunk in chunks} == {chunks[0].id}
    final = chunks[-1]
    assert final.choices == []
    assert final.usage is not None and final.usage.completion_tokens > 0 and final.usage.total_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


OUTAGES: dict[str, dict[str, Any]] = {
    "persistent-503": {"mode": "status", "status": 503},
    "reset-before-headers": {"mode": "reset"},
}


# --- A primary outage, policy on: one clean answer --------------------------------------------------------


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
def test_a_completion_during_a_primary_outage_is_one_clean_answer(world, outage):
    with rig(world, ON) as r:
        r.fault("openai", **outage)
        completion = complete(r)

    assert isinstance(completion, ChatCompletion)
    assert completion.model == "claude"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.total_tokens > 0
    # The primary and its one retry, then the first chain entry.
    assert r.calls() == {"openai": 2, "backup": 1}


@pytest.mark.parametrize("outage", OUTAGES.values(), ids=OUTAGES.keys())
def test_a_stream_during_a_primary_outage_is_one_clean_answer(world, outage):
    with rig(world, ON) as r:
        r.fault("openai", **outage)
        chunks = stream(r)

    assert_one_clean_stream(chunks)
    assert {chunk.model for chunk in chunks} == {"claude"}
    assert r.calls() == {"openai": 2, "backup": 1}


def test_the_raw_response_names_the_attempts_and_the_serving_model(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="status", status=503)
        raw = client(r).chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)
        completion = raw.parse()

    assert raw.status_code == 200
    assert raw.headers["x-vidai-attempts"] == "3"
    assert raw.headers["x-vidai-model"] == "claude"
    assert raw.headers["x-vidai-fallback"] == "true"
    assert completion.model == "claude" and completion.choices[0].message.content
    assert r.calls() == {"openai": 2, "backup": 1}


def test_a_stream_cut_midway_continues_on_a_prefill_entry_as_one_answer(world):
    prefill("claude")
    with rig(world, ON) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        chunks = stream(r)

    # No exception, and the client cannot tell where the cut was: the text is whole and the id is one.
    assert_one_clean_stream(chunks)
    assert r.calls() == {"openai": 1, "backup": 1}


def test_the_raw_streamed_response_names_the_primary_that_started_it(world):
    prefill("claude")
    with rig(world, ON) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        raw = client(r).chat.completions.with_raw_response.create(
            model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
        )
        with raw.parse() as parsed:
            chunks = list(parsed)

    # The headers went out with the primary's first chunk, before the cut.
    assert raw.headers["x-vidai-model"] == "gpt-4o"
    assert_one_clean_stream(chunks)
    assert r.calls() == {"openai": 1, "backup": 1}


# --- What the policy does not hide ------------------------------------------------------------------------


def test_a_content_filter_refusal_is_the_providers_bad_request_after_one_call(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="content_filter")
        with pytest.raises(openai.BadRequestError) as raised:
            complete(r)

    error = raised.value
    assert error.status_code == 400
    assert error.code == "content_filter"
    assert error.param == "prompt"
    assert r.calls() == {"openai": 1}


def test_a_content_filter_refusal_of_a_stream_raises_before_any_chunk(world):
    with rig(world, ON) as r:
        r.fault("openai", mode="content_filter", error_code="content_policy_violation")
        with pytest.raises(openai.BadRequestError) as raised:
            stream(r)

    assert raised.value.code == "content_policy_violation"
    assert r.calls() == {"openai": 1}


def test_the_same_outage_with_the_policy_off_is_the_providers_503(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="status", status=503)
        with pytest.raises(openai.InternalServerError) as raised:
            complete(r)

    error = raised.value
    assert isinstance(error, openai.APIStatusError)
    assert error.status_code == 503
    assert error.message.endswith("Simulated 503 from openai")
    assert r.calls() == {"openai": 1}


def test_a_stream_during_the_outage_with_the_policy_off_raises_503(world):
    with rig(world, OFF) as r:
        r.fault("openai", mode="status", status=503)
        with pytest.raises(openai.InternalServerError) as raised:
            stream(r)

    assert raised.value.status_code == 503
    assert r.calls() == {"openai": 1}


def test_a_stream_cut_with_the_policy_off_raises_in_the_middle_of_the_answer(world):
    prefill("claude")
    received: list[ChatCompletionChunk] = []
    with rig(world, OFF) as r:
        r.fault("openai", mode="midstream", fail_after_chunks=3)
        with (
            pytest.raises(openai.APIError) as raised,
            client(r).chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True) as chunks,
        ):
            for chunk in chunks:
                received.append(chunk)

    assert text(received) == "word1 word2 "
    assert raised.value.code == "stream_interrupted"
    assert r.calls() == {"openai": 1}
