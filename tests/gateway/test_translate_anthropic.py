"""OpenAI Chat Completions <-> Anthropic Messages translation: fixtures for each direction, and round trips."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.translate import (
    OPENAI_SSE_DONE,
    AnthropicToOpenAIStream,
    OpenAIToAnthropicStream,
    TranslationError,
    anthropic_error_to_openai,
    anthropic_sse,
    anthropic_to_openai_request,
    anthropic_to_openai_response,
    openai_error_to_anthropic,
    openai_sse,
    openai_to_anthropic_request,
    openai_to_anthropic_response,
)

pytestmark = pytest.mark.db_independent

Json = dict[str, Any]
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8/5+hHgAHggJ/PchI7wAAAABJRU5ErkJggg=="


def to_anthropic(payload: Json) -> Json:
    return openai_to_anthropic_request(payload, max_tokens_default=4096)


def weather_call(call_id: str = "call_1", arguments: str = '{"city":"Paris"}') -> Json:
    return {"id": call_id, "type": "function", "function": {"name": "get_weather", "arguments": arguments}}


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ANTHROPIC_WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


# ---------------------------------------------------------------- OpenAI request -> Anthropic request

OPENAI_TO_ANTHROPIC_REQUESTS = [
    pytest.param(
        {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]},
        {"model": "m", "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4096},
        id="system-and-default-max-tokens",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": "One."},
                {"role": "developer", "content": [{"type": "text", "text": "Two."}]},
                {"role": "user", "content": "Hi"},
            ],
            "max_tokens": 10,
        },
        {
            "model": "m",
            "system": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}],
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 10,
        },
        id="every-system-and-developer-message",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What are these?"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}", "detail": "low"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                    ],
                }
            ],
            "max_completion_tokens": 50,
            "max_tokens": 999,
        },
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What are these?"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                    ],
                }
            ],
            "max_tokens": 50,
        },
        id="images-and-max-completion-tokens-wins",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [weather_call("call_1"), weather_call("call_2", '{"city":"Rome"}')],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
                {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "24C"}]},
                {"role": "user", "content": "And tomorrow?"},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "auto",
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "call_1", "name": "get_weather", "input": {"city": "Paris"}},
                        {"type": "tool_use", "id": "call_2", "name": "get_weather", "input": {"city": "Rome"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "call_1", "content": "18C"},
                        {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "24C"}]},
                        {"type": "text", "text": "And tomorrow?"},
                    ],
                },
            ],
            "max_tokens": 4096,
            "tools": [ANTHROPIC_WEATHER_TOOL],
            "tool_choice": {"type": "auto"},
        },
        id="tool-calls-and-merged-tool-results",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "a"},
                {"role": "user", "content": "b"},
                {"role": "assistant", "content": "The answer is"},
            ],
            "stop": "\n\n",
            "temperature": 0.5,
            "top_p": 0.9,
            "stream": True,
            "user": "u-42",
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": "The answer is"},
            ],
            "max_tokens": 4096,
            "temperature": 0.5,
            "top_p": 0.9,
            "stop_sequences": ["\n\n"],
            "stream": True,
            "metadata": {"user_id": "u-42"},
        },
        id="merged-users-prefill-stop-sampling-user",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "stop": ["END", "STOP"],
            "tools": [WEATHER_TOOL],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "parallel_tool_calls": False,
            "metadata": {"user": "u-7"},
        },
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4096,
            "stop_sequences": ["END", "STOP"],
            "tools": [ANTHROPIC_WEATHER_TOOL],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
            "metadata": {"user_id": "u-7"},
        },
        id="named-tool-choice-no-parallel-stop-list",
    ),
    pytest.param(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "n": 1,
            "logprobs": False,
            "presence_penalty": 0,
            "frequency_penalty": 0.0,
            "seed": 7,
            "stream_options": {"include_usage": True},
            "response_format": {"type": "text"},
            "logit_bias": {},
            "store": False,
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
        },
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Hi"}],
            "max_tokens": 4096,
            "tools": [ANTHROPIC_WEATHER_TOOL],
            "tool_choice": {"type": "any"},
        },
        id="harmless-parameters-dropped",
    ),
]


@pytest.mark.parametrize(("openai", "anthropic"), OPENAI_TO_ANTHROPIC_REQUESTS)
def test_openai_request_to_anthropic(openai: Json, anthropic: Json) -> None:
    assert to_anthropic(openai) == anthropic


def test_tool_choice_none_and_empty_arguments() -> None:
    out = to_anthropic(
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "tool_calls": [weather_call("c", "")]},
                {"role": "tool", "tool_call_id": "c", "content": None},
            ],
            "tools": [WEATHER_TOOL],
            "tool_choice": "none",
        }
    )
    assert out["tool_choice"] == {"type": "none"}
    assert out["messages"][1]["content"] == [{"type": "tool_use", "id": "c", "name": "get_weather", "input": {}}]
    assert out["messages"][2]["content"] == [{"type": "tool_result", "tool_use_id": "c", "content": ""}]


@pytest.mark.parametrize(
    ("prefill", "expected"),
    [
        ("The answer is ", [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "The answer is"}]),
        (" \n", [{"role": "user", "content": "Hi"}]),
    ],
)
def test_prefill_loses_only_its_trailing_whitespace(prefill: str, expected: list[Json]) -> None:
    """Anthropic refuses a final assistant turn ending in whitespace, so a prefill is right-trimmed."""
    payload = {"model": "m", "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": prefill}]}
    assert to_anthropic(payload)["messages"] == expected


def with_message(message: Json) -> Json:
    return {"model": "m", "messages": [{"role": "user", "content": "Hi"}, message]}


OPENAI_REFUSALS = [
    pytest.param({"model": "m", "messages": [], "n": 2}, "n", id="n>1"),
    pytest.param({"model": "m", "messages": [], "logprobs": True}, "logprobs", id="logprobs"),
    pytest.param({"model": "m", "messages": [], "top_logprobs": 3}, "top_logprobs", id="top_logprobs"),
    pytest.param({"model": "m", "messages": [], "temperature": 1.5}, "temperature", id="temperature>1"),
    pytest.param({"model": "m", "messages": [], "frequency_penalty": 0.5}, "frequency_penalty", id="penalty"),
    pytest.param({"model": "m", "messages": [], "logit_bias": {"50256": -100}}, "logit_bias", id="logit_bias"),
    pytest.param({"model": "m", "messages": [], "max_tokens": 0}, "max_tokens", id="max_tokens-zero"),
    pytest.param(
        {"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
        "response_format",
        id="json-schema",
    ),
    pytest.param({"model": "m", "messages": [], "response_format": {"type": "json_object"}}, "response_format"),
    pytest.param({"model": "m", "messages": [], "reasoning_effort": "high"}, "reasoning_effort", id="reasoning"),
    pytest.param({"model": "m", "messages": [], "frobnicate": True}, "frobnicate", id="unknown-parameter"),
    pytest.param({"model": "m", "messages": [], "tool_choice": "sometimes"}, "tool_choice", id="tool_choice"),
    pytest.param(
        {"model": "m", "messages": [], "tools": [{"type": "custom", "custom": {"name": "x"}}]},
        "tools[0].type",
        id="custom-tool",
    ),
    pytest.param(
        with_message({"role": "assistant", "tool_calls": [weather_call("c", '{"city": "Par')]}),
        "messages[1].tool_calls[0].function.arguments",
        id="invalid-json-arguments",
    ),
    pytest.param(
        with_message({"role": "assistant", "tool_calls": [weather_call("c", "[1, 2]")]}),
        "messages[1].tool_calls[0].function.arguments",
        id="non-object-arguments",
    ),
    pytest.param(
        with_message({"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}),
        "messages[1].content[0].type",
        id="audio-part",
    ),
    pytest.param(
        with_message(
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "data:image/svg+xml;base64,PHN2Zz4="}}],
            }
        ),
        "messages[1].content[0].image_url.url",
        id="svg-image",
    ),
    pytest.param(
        with_message({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x/y.png"}}]}),
        "messages[1].content[0].image_url.url",
        id="ftp-image",
    ),
    pytest.param(
        with_message({"role": "function", "name": "f", "content": "x"}), "messages[1].role", id="function-role"
    ),
    pytest.param(with_message({"role": "tool", "content": "x"}), "messages[1].tool_call_id", id="tool-without-id"),
]


@pytest.mark.parametrize(("payload", "param"), OPENAI_REFUSALS)
def test_openai_request_refusals_name_the_parameter(payload: Json, param: str) -> None:
    with pytest.raises(TranslationError) as caught:
        to_anthropic(payload)
    assert caught.value.param == param
    assert caught.value.openai_body()["error"]["param"] == param
    assert caught.value.anthropic_body()["error"]["message"].startswith(f"{param}: ")


# ---------------------------------------------------------------- Anthropic request -> OpenAI request

ANTHROPIC_TO_OPENAI_REQUESTS = [
    pytest.param(
        {"model": "m", "max_tokens": 100, "system": "Be brief.", "messages": [{"role": "user", "content": "Hi"}]},
        {
            "model": "m",
            "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
            "max_completion_tokens": 100,
        },
        id="system-string",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 100,
            "system": [
                {"type": "text", "text": "One."},
                {"type": "text", "text": "Two.", "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
                    ],
                }
            ],
            "stop_sequences": ["END"],
            "temperature": 0.2,
            "top_p": 0.8,
            "metadata": {"user_id": "u-1"},
            "stream": True,
        },
        {
            "model": "m",
            "messages": [
                {"role": "system", "content": [{"type": "text", "text": "One."}, {"type": "text", "text": "Two."}]},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Look"},
                        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
                    ],
                },
            ],
            "max_completion_tokens": 100,
            "temperature": 0.2,
            "top_p": 0.8,
            "stop": ["END"],
            "stream": True,
            "stream_options": {"include_usage": True},
            "user": "u-1",
        },
        id="system-blocks-images-stop-stream-user",
    ),
    pytest.param(
        {
            "model": "m",
            "max_tokens": 100,
            "tools": [ANTHROPIC_WEATHER_TOOL],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "Use the tool.", "signature": "sig"},
                        {"type": "text", "text": "Checking."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
                        {"type": "text", "text": "Thanks. Tomorrow?"},
                    ],
                },
            ],
        },
        {
            "model": "m",
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "toolu_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
                {"role": "user", "content": "Thanks. Tomorrow?"},
            ],
            "max_completion_tokens": 100,
            "tools": [WEATHER_TOOL],
            "tool_choice": "required",
            "parallel_tool_calls": False,
        },
        id="tool-use-and-tool-result",
    ),
]


@pytest.mark.parametrize(("anthropic", "openai"), ANTHROPIC_TO_OPENAI_REQUESTS)
def test_anthropic_request_to_openai(anthropic: Json, openai: Json) -> None:
    assert anthropic_to_openai_request(anthropic) == openai


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "get_weather"},
            {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        ),
    ],
)
def test_anthropic_tool_choice(choice: Json, expected: Json) -> None:
    out = anthropic_to_openai_request({"model": "m", "max_tokens": 1, "messages": [], "tool_choice": choice})
    assert {key: out[key] for key in ("tool_choice", "parallel_tool_calls") if key in out} == expected


def test_max_tokens_field_follows_the_upstream() -> None:
    out = anthropic_to_openai_request({"model": "m", "max_tokens": 9, "messages": []}, max_tokens_param="max_tokens")
    assert out["max_tokens"] == 9
    assert "max_completion_tokens" not in out


ANTHROPIC_REFUSALS = [
    pytest.param({"top_k": 40}, "top_k", id="top_k"),
    pytest.param({"thinking": {"type": "enabled", "budget_tokens": 2000}}, "thinking", id="thinking"),
    pytest.param({"mcp_servers": [{"type": "url", "url": "https://x"}]}, "mcp_servers", id="unknown-parameter"),
    pytest.param({"tools": [{"type": "web_search_20250305", "name": "web_search"}]}, "tools[0].type", id="server-tool"),
    pytest.param({"tool_choice": {"type": "sometimes"}}, "tool_choice", id="tool_choice"),
    pytest.param(
        {"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "text", "data": "x"}}]}]},
        "messages[0].content[0].type",
        id="document",
    ),
    pytest.param(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t",
                            "content": [
                                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
                            ],
                        }
                    ],
                }
            ]
        },
        "messages[0].content[0].content[0].type",
        id="image-in-tool-result",
    ),
    pytest.param(
        {"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "file", "file_id": "f"}}]}]},
        "messages[0].content[0].source.type",
        id="file-image",
    ),
    pytest.param({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role", id="system-role"),
    # Anthropic's range is 0 to 1, whichever protocol serves the request (OpenAI's would take 1.5).
    pytest.param({"temperature": 1.5}, "temperature", id="temperature>1"),
    pytest.param({"temperature": -0.1}, "temperature", id="temperature<0"),
    pytest.param({"temperature": "0.5"}, "temperature", id="temperature-string"),
]


@pytest.mark.parametrize(("extra", "param"), ANTHROPIC_REFUSALS)
def test_anthropic_request_refusals_name_the_parameter(extra: Json, param: str) -> None:
    payload = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "Hi"}], **extra}
    with pytest.raises(TranslationError) as caught:
        anthropic_to_openai_request(payload)
    assert caught.value.param == param


def test_disabled_thinking_and_service_tier_are_dropped() -> None:
    payload = {"model": "m", "max_tokens": 5, "messages": [], "thinking": {"type": "disabled"}, "service_tier": "auto"}
    assert anthropic_to_openai_request(payload) == {"model": "m", "messages": [], "max_completion_tokens": 5}


# ---------------------------------------------------------------- responses

ANTHROPIC_RESPONSE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-x",
    "content": [
        {"type": "text", "text": "Let me "},
        {"type": "text", "text": "check."},
        {"type": "tool_use", "id": "toolu_9", "name": "get_weather", "input": {"city": "Paris", "days": 2}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 3},
}


def test_anthropic_response_to_openai() -> None:
    out = anthropic_to_openai_response(ANTHROPIC_RESPONSE, model="alias", created=1700000000)
    assert out == {
        "id": "msg_01",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "alias",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "refusal": None,
                    "tool_calls": [
                        {
                            "id": "toolu_9",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris","days":2}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {
            "prompt_tokens": 103,
            "completion_tokens": 5,
            "total_tokens": 108,
            "prompt_tokens_details": {"cached_tokens": 90},
        },
    }


@pytest.mark.parametrize(
    ("stop_reason", "finish_reason"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("pause_turn", "stop"),
        ("model_context_window_exceeded", "length"),
    ],
)
def test_stop_reasons_become_finish_reasons(stop_reason: str, finish_reason: str) -> None:
    body = {
        "id": "m",
        "model": "c",
        "content": [{"type": "text", "text": "x"}],
        "stop_reason": stop_reason,
        "usage": {},
    }
    assert anthropic_to_openai_response(body, created=0)["choices"][0]["finish_reason"] == finish_reason


OPENAI_RESPONSE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "gpt-x",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Checking.", "tool_calls": [weather_call("call_5")]},
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "total_tokens": 107,
        "prompt_tokens_details": {"cached_tokens": 60},
    },
}


def test_openai_response_to_anthropic() -> None:
    assert openai_to_anthropic_response(OPENAI_RESPONSE) == {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "model": "gpt-x",
        "content": [
            {"type": "text", "text": "Checking."},
            {"type": "tool_use", "id": "call_5", "name": "get_weather", "input": {"city": "Paris"}},
        ],
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 40, "output_tokens": 7, "cache_read_input_tokens": 60},
    }


@pytest.mark.parametrize(
    ("message", "finish_reason", "stop_reason"),
    [
        ({"content": "x"}, "stop", "end_turn"),
        ({"content": "x"}, "length", "max_tokens"),
        ({"content": None, "tool_calls": [weather_call()]}, "tool_calls", "tool_use"),
        ({"content": "x"}, "content_filter", "refusal"),
        ({"content": None, "refusal": "I can't help with that."}, "stop", "refusal"),
    ],
)
def test_finish_reasons_become_stop_reasons(message: Json, finish_reason: str, stop_reason: str) -> None:
    body = {"id": "c", "model": "g", "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}]}
    out = openai_to_anthropic_response(body, model="alias")
    assert out["stop_reason"] == stop_reason
    assert out["model"] == "alias"
    assert out["content"]


def test_openai_response_with_broken_arguments_is_an_error_not_an_invented_input() -> None:
    body = {
        "choices": [
            {"message": {"content": None, "tool_calls": [weather_call("c", "{oops")]}, "finish_reason": "tool_calls"}
        ]
    }
    with pytest.raises(TranslationError) as caught:
        openai_to_anthropic_response(body)
    assert caught.value.param == "choices[0].message.tool_calls[0].function.arguments"


# ---------------------------------------------------------------- errors

ANTHROPIC_ERRORS = [
    (400, "invalid_request_error", 400, "invalid_request_error"),
    (401, "authentication_error", 401, "authentication_error"),
    (402, "billing_error", 402, "insufficient_quota"),
    (403, "permission_error", 403, "permission_error"),
    (404, "not_found_error", 404, "invalid_request_error"),
    (413, "request_too_large", 413, "invalid_request_error"),
    (429, "rate_limit_error", 429, "rate_limit_error"),
    (500, "api_error", 500, "server_error"),
    (504, "timeout_error", 504, "server_error"),
    (529, "overloaded_error", 503, "server_error"),
]


@pytest.mark.parametrize(("status", "kind", "out_status", "out_kind"), ANTHROPIC_ERRORS)
def test_anthropic_errors_to_openai(status: int, kind: str, out_status: int, out_kind: str) -> None:
    body = json.dumps({"type": "error", "error": {"type": kind, "message": f"says {kind}"}}).encode()
    assert anthropic_error_to_openai(status, body) == (
        out_status,
        {"error": {"message": f"says {kind}", "type": out_kind, "param": None, "code": kind}},
    )


OPENAI_ERRORS = [
    (400, 400, "invalid_request_error"),
    (401, 401, "authentication_error"),
    (402, 402, "billing_error"),
    (403, 403, "permission_error"),
    (404, 404, "not_found_error"),
    (413, 413, "request_too_large"),
    (422, 422, "invalid_request_error"),
    (429, 429, "rate_limit_error"),
    (500, 500, "api_error"),
    (502, 502, "api_error"),
    (503, 529, "overloaded_error"),
    (504, 504, "timeout_error"),
]


@pytest.mark.parametrize(("status", "out_status", "out_kind"), OPENAI_ERRORS)
def test_openai_errors_to_anthropic(status: int, out_status: int, out_kind: str) -> None:
    body = {
        "error": {"message": "Rate limit reached", "type": "requests", "param": None, "code": "rate_limit_exceeded"}
    }
    assert openai_error_to_anthropic(status, body) == (
        out_status,
        {"type": "error", "error": {"type": out_kind, "message": "Rate limit reached"}},
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"<html>Bad Gateway</html>", "<html>Bad Gateway</html>"),
        (b"", "Upstream error (HTTP 529)."),
        (b'{"error": "plain string"}', "plain string"),
        (b'{"detail": "Not Found"}', "Not Found"),
        (b"[1, 2]", "[1, 2]"),
    ],
)
def test_error_messages_survive_odd_bodies(body: bytes, message: str) -> None:
    status, anthropic_shaped = openai_error_to_anthropic(529, body)
    assert anthropic_shaped["error"]["message"] == message
    status, openai_shaped = anthropic_error_to_openai(529, body)
    assert (status, openai_shaped["error"]["message"], openai_shaped["error"]["code"]) == (
        503,
        message,
        "overloaded_error",
    )


def test_unknown_anthropic_error_type_falls_back_on_the_status() -> None:
    body = {"type": "error", "error": {"type": "brand_new_error", "message": "m"}}
    assert anthropic_error_to_openai(429, body)[1]["error"]["type"] == "rate_limit_error"
    assert anthropic_error_to_openai(409, body) == (
        409,
        {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": "invalid_request_error"}},
    )


# ---------------------------------------------------------------- streams: Anthropic -> OpenAI


def anthropic_events(
    text_pieces: list[str], tools: list[tuple[str, str, list[str]]], stop: str = "tool_use"
) -> list[tuple[str, Json]]:
    """A realistic Messages stream: start, ping, a text block, tool_use blocks with input_json_delta pieces, end."""
    events: list[tuple[str, Json]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_s",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-x",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 25, "cache_read_input_tokens": 5, "output_tokens": 1},
                },
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    index = 0
    if text_pieces:
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            )
        )
        for piece in text_pieces:
            delta = {"type": "text_delta", "text": piece}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        index = 1
    for call_id, name, pieces in tools:
        block = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
        events.append(("content_block_start", {"type": "content_block_start", "index": index, "content_block": block}))
        for piece in pieces:
            delta = {"type": "input_json_delta", "partial_json": piece}
            events.append(("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    events.append(
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 42},
            },
        )
    )
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def collect_openai(chunks: list[Json]) -> tuple[str, dict[int, Json], list[str | None]]:
    """Concatenated content, tool calls by index (id, name, arguments) and finish reasons, as a client would."""
    content = ""
    calls: dict[int, Json] = {}
    finishes: list[str | None] = []
    for chunk in chunks:
        for choice in chunk["choices"]:
            delta = choice["delta"]
            content += delta.get("content") or ""
            for call in delta.get("tool_calls") or []:
                slot = calls.setdefault(call["index"], {"id": None, "name": None, "arguments": ""})
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = call.get("function", {}).get("name") or slot["name"]
                slot["arguments"] += call.get("function", {}).get("arguments") or ""
            if choice["finish_reason"]:
                finishes.append(choice["finish_reason"])
    return content, calls, finishes


def run_anthropic_stream(events: list[tuple[str, Json]], *, include_usage: bool = False) -> list[Json]:
    converter = AnthropicToOpenAIStream("alias", include_usage=include_usage, created=123)
    return [chunk for event, data in events for chunk in converter.feed(event, data)]


def test_anthropic_stream_with_text_and_two_tool_calls() -> None:
    events = anthropic_events(
        ["Let me ", "check."],
        [("toolu_a", "get_weather", ['{"ci', 'ty": "Pa', 'ris"}']), ("toolu_b", "get_time", ["", '{"tz":', ' "CET"}'])],
    )
    chunks = run_anthropic_stream(events, include_usage=True)
    content, calls, finishes = collect_openai(chunks)
    assert content == "Let me check."
    assert calls == {
        0: {"id": "toolu_a", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        1: {"id": "toolu_b", "name": "get_time", "arguments": '{"tz": "CET"}'},
    }
    assert finishes == ["tool_calls"]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(chunk["id"] == "msg_s" and chunk["model"] == "alias" and chunk["created"] == 123 for chunk in chunks)
    assert all(chunk["usage"] is None for chunk in chunks[:-1])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 42,
        "total_tokens": 72,
        "prompt_tokens_details": {"cached_tokens": 5},
    }


def test_anthropic_stream_without_usage_has_no_usage_chunk() -> None:
    chunks = run_anthropic_stream(anthropic_events(["Hi"], [], stop="max_tokens"))
    assert all("usage" not in chunk and chunk["choices"] for chunk in chunks)
    assert collect_openai(chunks)[2] == ["length"]


def test_anthropic_stream_error_event_ends_the_stream() -> None:
    converter = AnthropicToOpenAIStream("alias", created=0)
    converter.feed(*anthropic_events(["Hi"], [])[0])
    error = converter.feed("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert error == [
        {"error": {"message": "Overloaded", "type": "server_error", "param": None, "code": "overloaded_error"}}
    ]
    assert converter.feed("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "late"}}) == []


def test_anthropic_stream_ignores_thinking_blocks() -> None:
    converter = AnthropicToOpenAIStream("alias", created=0)
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}
    delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hmm"}}
    assert converter.feed("content_block_start", start) == []
    assert converter.feed("content_block_delta", delta) == []


# ---------------------------------------------------------------- streams: OpenAI -> Anthropic


def openai_chunks(
    text_pieces: list[str], tools: list[tuple[str, str, list[str]]], finish: str = "tool_calls"
) -> list[Json]:
    """A realistic OpenAI stream: a role chunk, content pieces, tool calls by index, the finish, then usage."""

    def chunk(delta: Json, finish_reason: str | None = None) -> Json:
        return {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-x",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }

    chunks = [chunk({"role": "assistant", "content": ""})]
    chunks += [chunk({"content": piece}) for piece in text_pieces]
    for position, (call_id, name, pieces) in enumerate(tools):
        first = {"index": position, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        chunks.append(chunk({"tool_calls": [first]}))
        chunks += [chunk({"tool_calls": [{"index": position, "function": {"arguments": piece}}]}) for piece in pieces]
    chunks.append(chunk({}, finish))
    chunks.append(
        {
            "id": "chatcmpl-s",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "gpt-x",
            "choices": [],
            "usage": {"prompt_tokens": 30, "completion_tokens": 9, "total_tokens": 39},
        }
    )
    return chunks


def collect_anthropic(events: list[tuple[str, Json]]) -> tuple[list[Json], Json]:
    """The content blocks as a client assembles them, checking the event grammar on the way; and the final delta."""
    assert events[0][0] == "message_start"
    assert [name for name, _ in events[-2:]] == ["message_delta", "message_stop"]
    blocks: list[Json] = []
    open_index: int | None = None
    for name, data in events[1:-2]:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append({**data["content_block"], "partial_json": ""})
        elif name == "content_block_delta":
            assert data["index"] == open_index
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            else:
                block["partial_json"] += delta["partial_json"]
        else:
            assert name == "content_block_stop" and data["index"] == open_index
            open_index = None
    assert open_index is None
    return blocks, events[-2][1]


def test_openai_stream_with_text_and_two_tool_calls() -> None:
    converter = OpenAIToAnthropicStream("alias")
    chunks = openai_chunks(
        ["Let me ", "check."],
        [("call_a", "get_weather", ['{"ci', 'ty":"Paris"}']), ("call_b", "get_time", ['{"tz":"CET"}'])],
    )
    events = [event for chunk in chunks for event in converter.feed(chunk)]
    assert converter.finish() == []
    blocks, final = collect_anthropic(events)
    assert [(b["type"], b.get("text"), b.get("id"), b.get("name")) for b in blocks] == [
        ("text", "Let me check.", None, None),
        ("tool_use", None, "call_a", "get_weather"),
        ("tool_use", None, "call_b", "get_time"),
    ]
    assert json.loads(blocks[1]["partial_json"]) == {"city": "Paris"}
    assert json.loads(blocks[2]["partial_json"]) == {"tz": "CET"}
    assert final == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"input_tokens": 30, "output_tokens": 9, "cache_read_input_tokens": 0},
    }
    start = events[0][1]["message"]
    assert (start["id"], start["model"], start["role"], start["content"]) == ("chatcmpl-s", "alias", "assistant", [])


def test_openai_stream_without_usage_ends_at_finish() -> None:
    converter = OpenAIToAnthropicStream("alias", message_id="msg_x")
    events = [event for chunk in openai_chunks(["Hi"], [], finish="length")[:-1] for event in converter.feed(chunk)]
    assert events[-1][0] == "content_block_stop"
    events += converter.finish()
    blocks, final = collect_anthropic(events)
    assert blocks[0]["text"] == "Hi"
    assert final["delta"]["stop_reason"] == "max_tokens"
    assert events[0][1]["message"]["id"] == "msg_x"


def test_openai_stream_that_said_nothing_still_closes() -> None:
    events = OpenAIToAnthropicStream("alias").finish()
    assert [name for name, _ in events] == ["message_start", "message_delta", "message_stop"]


def test_openai_stream_error_chunk() -> None:
    converter = OpenAIToAnthropicStream("alias")
    converter.feed(openai_chunks(["Hi"], [])[0])
    events = converter.feed(
        {"error": {"message": "upstream went away", "type": "upstream_error", "code": "overloaded"}}
    )
    assert events == [
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "upstream went away"}})
    ]
    assert converter.finish() == []


def test_openai_stream_interleaved_tool_arguments_are_refused() -> None:
    converter = OpenAIToAnthropicStream("alias")
    chunks = openai_chunks([], [("a", "f", []), ("b", "g", [])])
    for chunk in chunks[:3]:
        converter.feed(chunk)
    late = {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}}]}
    with pytest.raises(TranslationError):
        converter.feed(late)


def test_sse_framing() -> None:
    assert openai_sse({"a": 1}) == b'data: {"a":1}\n\n'
    assert OPENAI_SSE_DONE == b"data: [DONE]\n\n"
    assert (
        anthropic_sse("message_stop", {"type": "message_stop"})
        == b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
    )


# ---------------------------------------------------------------- properties: round trips

texts = st.text(min_size=1, max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=6),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(st.text(max_size=5), json_values, max_size=3)
ids = st.from_regex(r"[A-Za-z0-9_]{1,10}", fullmatch=True)
names = st.from_regex(r"[a-z_]{1,8}", fullmatch=True)
images = st.one_of(
    st.builds(
        lambda data: f"data:image/png;base64,{data}", st.from_regex(r"[A-Za-z0-9+/]{4,16}={0,2}", fullmatch=True)
    ),
    st.builds(lambda path: f"https://example.com/{path}.jpg", names),
)


@st.composite
def openai_conversations(draw: st.DrawFn) -> list[Json]:
    messages: list[Json] = [{"role": "system", "content": text} for text in draw(st.lists(texts, max_size=2))]
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["user", "user_parts", "assistant", "tool_turn"]))
        if kind == "user":
            messages.append({"role": "user", "content": draw(texts)})
        elif kind == "user_parts":
            parts = draw(
                st.lists(
                    st.one_of(
                        texts.map(lambda t: {"type": "text", "text": t}),
                        images.map(lambda u: {"type": "image_url", "image_url": {"url": u}}),
                    ),
                    min_size=1,
                    max_size=3,
                )
            )
            messages.append({"role": "user", "content": parts})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(texts)})
        else:
            calls = draw(st.lists(st.tuples(ids, names, arguments), min_size=1, max_size=3))
            tool_calls = [
                {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for i, n, a in calls
            ]
            messages.append({"role": "assistant", "content": draw(st.none() | texts), "tool_calls": tool_calls})
            messages += [{"role": "tool", "tool_call_id": i, "content": draw(texts)} for i, _, _ in calls]
    return messages


def openai_normal_form(messages: list[Json]) -> tuple[list[str], list[tuple[str, list[Any]]]]:
    """System texts, and turns (tool results count as user, same-role neighbours merged) of comparable items."""
    system: list[str] = []
    turns: list[tuple[str, list[Any]]] = []
    for message in messages:
        content = message.get("content")
        parts: list[Json] = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        items: list[Any] = []
        for part in parts:
            items.append(("text", part["text"]) if part["type"] == "text" else ("image", part["image_url"]["url"]))
        if message["role"] == "system":
            system += [text for _, text in items]
            continue
        for call in message.get("tool_calls") or []:
            items.append(("tool_use", call["id"], call["function"]["name"], json.loads(call["function"]["arguments"])))
        role = message["role"]
        if role == "tool":
            role, items = "user", [("tool_result", message["tool_call_id"], content)]
        if turns and turns[-1][0] == role:
            turns[-1][1].extend(items)
        else:
            turns.append((role, items))
    return system, turns


def trim_prefill(turns: list[tuple[str, list[Any]]]) -> list[tuple[str, list[Any]]]:
    """What the translation does to a final assistant text: trailing whitespace goes (Anthropic refuses it)."""
    if not turns or turns[-1][0] != "assistant" or turns[-1][1][-1][0] != "text":
        return turns
    items = [*turns[-1][1][:-1]]
    if turns[-1][1][-1][1].rstrip():
        items.append(("text", turns[-1][1][-1][1].rstrip()))
    return [*turns[:-1], ("assistant", items)] if items else turns[:-1]


@settings(max_examples=200, deadline=None)
@given(openai_conversations())
def test_openai_to_anthropic_to_openai_keeps_the_conversation(messages: list[Json]) -> None:
    anthropic = to_anthropic({"model": "m", "messages": messages})
    roles = [message["role"] for message in anthropic["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles)), "Anthropic turns must alternate"
    back = anthropic_to_openai_request(anthropic)
    system, turns = openai_normal_form(messages)
    assert openai_normal_form(back["messages"]) == (system, trim_prefill(turns))


def anthropic_block(kind: str, draw: st.DrawFn) -> Json:
    if kind == "text":
        return {"type": "text", "text": draw(texts)}
    if kind == "image":
        url = draw(images)
        if url.startswith("data:"):
            return {
                "type": "image",
                "source": {"type": "base64", "media_type": "image/png", "data": url.split(",", 1)[1]},
            }
        return {"type": "image", "source": {"type": "url", "url": url}}
    if kind == "tool_use":
        return {"type": "tool_use", "id": draw(ids), "name": draw(names), "input": draw(arguments)}
    content = draw(st.one_of(texts, st.lists(texts.map(lambda t: {"type": "text", "text": t}), min_size=1, max_size=2)))
    return {"type": "tool_result", "tool_use_id": draw(ids), "content": content}


@st.composite
def anthropic_conversations(draw: st.DrawFn) -> list[Json]:
    messages = []
    for position in range(draw(st.integers(1, 6))):
        role = "user" if position % 2 == 0 else "assistant"
        if role == "user":
            results = [anthropic_block("tool_result", draw) for _ in range(draw(st.integers(0, 2)))]
            rest = [
                anthropic_block(draw(st.sampled_from(["text", "image"])), draw)
                for _ in range(draw(st.integers(0 if results else 1, 2)))
            ]
            blocks = results + rest
        else:
            blocks = [
                anthropic_block(draw(st.sampled_from(["text", "tool_use"])), draw)
                for _ in range(draw(st.integers(1, 3)))
            ]
        as_string = len(blocks) == 1 and blocks[0]["type"] == "text" and draw(st.booleans())
        messages.append({"role": role, "content": blocks[0]["text"] if as_string else blocks})
    return messages


def anthropic_normal_form(messages: list[Json]) -> list[tuple[str, list[Any]]]:
    turns: list[tuple[str, list[Any]]] = []
    for message in messages:
        content = message["content"]
        blocks: list[Json] = [{"type": "text", "text": content}] if isinstance(content, str) else content
        items: list[Any] = []
        for block in blocks:
            if block["type"] == "text":
                items.append(("text", block["text"]))
            elif block["type"] == "image":
                source = block["source"]
                items.append(("image", source.get("data") or source.get("url")))
            elif block["type"] == "tool_use":
                items.append(("tool_use", block["id"], block["name"], block["input"]))
            else:
                result = block["content"]
                result_texts = [result] if isinstance(result, str) else [part["text"] for part in result]
                items.append(("tool_result", block["tool_use_id"], [text for text in result_texts if text]))
        if message["role"] == "assistant":
            # OpenAI has one content and then tool_calls: an assistant's text always comes before its tool uses.
            items.sort(key=lambda item: item[0] == "tool_use")
        if turns and turns[-1][0] == message["role"]:
            turns[-1][1].extend(items)
        else:
            turns.append((message["role"], items))
    return turns


@settings(max_examples=200, deadline=None)
@given(anthropic_conversations(), st.one_of(st.none(), texts, st.lists(texts, min_size=1, max_size=2)))
def test_anthropic_to_openai_to_anthropic_keeps_the_conversation(messages: list[Json], system: Any) -> None:
    payload: Json = {"model": "m", "max_tokens": 77, "messages": messages}
    if system is not None:
        payload["system"] = system if isinstance(system, str) else [{"type": "text", "text": text} for text in system]
    back = to_anthropic(anthropic_to_openai_request(payload))
    assert anthropic_normal_form(back["messages"]) == trim_prefill(anthropic_normal_form(messages))
    assert back["max_tokens"] == 77
    if system is None:
        assert "system" not in back
    elif isinstance(system, str) or len(system) == 1:
        assert back["system"] == (system if isinstance(system, str) else system[0])
    else:
        assert [block["text"] for block in back["system"]] == system


def split(text: str, cuts: list[int]) -> list[str]:
    points = sorted({cut % (len(text) + 1) for cut in cuts} | {0, len(text)})
    return [text[a:b] for a, b in itertools.pairwise(points)]


@settings(max_examples=100, deadline=None)
@given(
    st.text(max_size=30),
    st.lists(st.tuples(ids, names, arguments, st.lists(st.integers(0, 200), max_size=4)), max_size=3),
    st.lists(st.integers(0, 200), max_size=5),
)
def test_streams_round_trip_through_both_converters(text: str, tools: list[Any], cuts: list[int]) -> None:
    """Anthropic events -> OpenAI chunks -> Anthropic events: the same text, tool ids, names and arguments."""
    tool_specs = [(call_id, name, split(json.dumps(args), tool_cuts)) for call_id, name, args, tool_cuts in tools]
    events = anthropic_events(split(text, cuts) if text else [], tool_specs, stop="tool_use" if tools else "end_turn")
    chunks = run_anthropic_stream(events, include_usage=True)
    content, calls, _ = collect_openai(chunks)
    assert content == text
    assert [(c["id"], c["name"], json.loads(c["arguments"])) for c in calls.values()] == [
        (i, n, a) for i, n, a, _ in tools
    ]

    converter = OpenAIToAnthropicStream("alias")
    back = [event for chunk in chunks for event in converter.feed(chunk)] + converter.finish()
    blocks, final = collect_anthropic(back)
    assert "".join(block["text"] for block in blocks if block["type"] == "text") == text
    round_tripped = [(b["id"], b["name"], json.loads(b["partial_json"])) for b in blocks if b["type"] == "tool_use"]
    assert round_tripped == [(i, n, a) for i, n, a, _ in tools]
    assert final["delta"]["stop_reason"] == ("tool_use" if tools else "end_turn")
    assert final["usage"]["output_tokens"] == 42
