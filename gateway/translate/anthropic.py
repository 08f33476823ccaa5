"""OpenAI Chat Completions <-> Anthropic Messages: requests and whole (non-streamed) responses.

Pure functions on parsed JSON: no I/O, no clock unless the caller leaves `created` out. The gateway's
canonical shape is the OpenAI one; these let a chain fall back to an Anthropic upstream
(`openai_to_anthropic_request`, `anthropic_to_openai_response`) and let an Anthropic-shaped client
(`POST /v1/messages`) reach the OpenAI-shaped upstreams (`anthropic_to_openai_request`,
`openai_to_anthropic_response`). Streams are in `gateway.translate.stream`.

The rule for every parameter: translate it when the other protocol can say the same thing, drop it
only when dropping cannot change the answer (`n=1`, `seed`, a zero penalty), and otherwise refuse
with a `TranslationError` naming it. docs/protocols.md is the table.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Any, Literal

import orjson

from gateway.bodies import BodyLimits, estimate, structure, wide_numbers
from gateway.translate.errors import Json, TranslationError, as_count, as_object

# What one tool call's arguments may hold once parsed: the request body's own default limits.
ARGUMENTS_MAX_VALUES = BodyLimits.max_values
ARGUMENTS_MAX_DEPTH = BodyLimits.max_depth

# The image types the Messages API accepts as base64 data.
ANTHROPIC_IMAGE_TYPES = frozenset({"image/jpeg", "image/png", "image/gif", "image/webp"})
_DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.DOTALL)

# Anthropic stop_reason -> OpenAI finish_reason.
STOP_TO_FINISH: dict[str, str] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
# OpenAI finish_reason -> Anthropic stop_reason. OpenAI does not say whether a stop sequence matched.
FINISH_TO_STOP: dict[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _always(_value: Any) -> bool:
    return True


def _is_none(value: Any) -> bool:
    return value is None


def _in(*allowed: Any) -> Callable[[Any], bool]:
    return lambda value: value is None or any(value == candidate for candidate in allowed)


def _falsy(value: Any) -> bool:
    return not value


# OpenAI parameters with no Anthropic counterpart: dropped when the predicate holds (the value cannot
# change the answer), refused otherwise. The hint says what would be accepted.
OPENAI_DROPPABLE: dict[str, tuple[Callable[[Any], bool], str]] = {
    "n": (_in(1), "only n=1"),
    "logprobs": (_in(False), "only logprobs=false"),
    "top_logprobs": (_in(0), "only top_logprobs=0"),
    "presence_penalty": (_in(0), "only presence_penalty=0"),
    "frequency_penalty": (_in(0), "only frequency_penalty=0"),
    "logit_bias": (_falsy, "only an empty logit_bias"),
    "response_format": (_in({"type": "text"}), 'only response_format {"type": "text"}'),
    "modalities": (_in(["text"]), 'only modalities ["text"]'),
    "audio": (_is_none, "no audio output"),
    "reasoning_effort": (_is_none, "no reasoning_effort"),
    "verbosity": (_is_none, "no verbosity"),
    "web_search_options": (_is_none, "no web_search_options"),
    "functions": (_falsy, "tools instead of the deprecated functions"),
    "function_call": (_is_none, "tool_choice instead of the deprecated function_call"),
    # Best effort, storage, billing tier, caching and latency hints: never part of the answer.
    "seed": (_always, ""),
    "stream_options": (_always, ""),
    "store": (_always, ""),
    "service_tier": (_always, ""),
    "prediction": (_always, ""),
    "prompt_cache_key": (_always, ""),
    "safety_identifier": (_always, ""),
}
_OPENAI_TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "stream",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "user",
        "metadata",
    }
)
# Anthropic parameters with no OpenAI counterpart, on the same terms.
ANTHROPIC_DROPPABLE: dict[str, tuple[Callable[[Any], bool], str]] = {
    "top_k": (_is_none, "no top_k"),
    "thinking": (_in({"type": "disabled"}), 'only thinking {"type": "disabled"}'),
    "service_tier": (_always, ""),
}
_ANTHROPIC_TRANSLATED = frozenset(
    {
        "model",
        "messages",
        "system",
        "max_tokens",
        "temperature",
        "top_p",
        "stop_sequences",
        "stream",
        "tools",
        "tool_choice",
        "metadata",
    }
)


# ---------------------------------------------------------------- OpenAI request -> Anthropic request


def openai_to_anthropic_request(payload: Json, *, max_tokens_default: int) -> Json:
    """An OpenAI chat request as a Messages request; `max_tokens_default` fills Anthropic's required max_tokens."""
    _check_params(payload, _OPENAI_TRANSLATED, OPENAI_DROPPABLE, "Anthropic Messages")
    listed = _list(payload.get("messages"), "messages")
    _check_arguments_values(listed)
    system, messages = _openai_messages(listed)
    out: Json = {"model": payload.get("model"), "messages": messages}
    if system:
        out["system"] = system[0]["text"] if len(system) == 1 else system
    out["max_tokens"] = _max_tokens(payload, max_tokens_default)
    out.update(_openai_sampling(payload))
    stop = payload.get("stop")
    if stop:
        out["stop_sequences"] = [stop] if isinstance(stop, str) else _list(stop, "stop")
    if payload.get("stream") is not None:
        out["stream"] = _boolean(payload["stream"], "stream")
    if payload.get("tools"):
        out["tools"] = [_openai_tool(tool, f"tools[{i}]") for i, tool in enumerate(_list(payload["tools"], "tools"))]
    choice = _openai_tool_choice(payload.get("tool_choice"), payload.get("parallel_tool_calls"))
    if choice is not None:
        out["tool_choice"] = choice
    user = payload.get("user") or as_object(payload.get("metadata")).get("user")
    if isinstance(user, str) and user:
        out["metadata"] = {"user_id": user}
    return out


def _check_params(
    payload: Json, translated: frozenset[str], droppable: dict[str, tuple[Callable[[Any], bool], str]], target: str
) -> None:
    """Refuse any parameter that is neither translated nor harmless to drop at the value sent."""
    for param, value in payload.items():
        if param in translated:
            continue
        rule = droppable.get(param)
        if rule is None:
            raise TranslationError(param, f"`{param}` is not supported when the request is served by the {target} API.")
        allowed, hint = rule
        if not allowed(value):
            raise TranslationError(param, f"`{param}` has no equivalent in the {target} API (it accepts {hint}).")


def _max_tokens(payload: Json, default: int) -> int:
    for param in ("max_completion_tokens", "max_tokens"):
        value = payload.get(param)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise TranslationError(param, f"`{param}` must be a positive integer.")
        return value
    return default


def _openai_sampling(payload: Json) -> Json:
    """temperature and top_p. OpenAI allows temperature up to 2, Anthropic up to 1: above 1 is refused, not clamped."""
    out: Json = {}
    temperature = payload.get("temperature")
    if temperature is not None:
        out["temperature"] = _anthropic_temperature(temperature, "when the request is served by the Anthropic API")
    if payload.get("top_p") is not None:
        out["top_p"] = payload["top_p"]
    return out


def _anthropic_temperature(value: Any, where: str) -> float:
    """A temperature in Anthropic's range, 0 to 1 (OpenAI's goes to 2): anything else is refused, never clamped."""
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise TranslationError("temperature", f"`temperature` must be between 0 and 1 {where}.")
    return value


def _boolean(value: Any, param: str) -> bool:
    """A flag both APIs type as a boolean: anything else (a truthy 1, "true") is refused, not read as one way by
    the gateway (which streams only for `true`) and another by the upstream."""
    if not isinstance(value, bool):
        raise TranslationError(param, f"'{param}' must be a boolean.")
    return value


def _check_arguments_values(messages: list[Any]) -> None:
    """Refuse a request whose tool-call argument strings hold more keys and values in all than one may alone
    (each is one value to the body's limit, and parsing them builds every object they hold)."""
    strings = [
        (f"messages[{i}].tool_calls[{j}].function.arguments", function["arguments"].encode("utf-8", "surrogatepass"))
        for i, message in enumerate(messages)
        if isinstance(message, dict) and isinstance(message.get("tool_calls"), list)
        for j, call in enumerate(message["tool_calls"])
        if isinstance(call, dict)
        for function in (call.get("function"),)
        if isinstance(function, dict) and isinstance(function.get("arguments"), str)
    ]
    if sum(estimate(raw) for _, raw in strings) <= ARGUMENTS_MAX_VALUES:
        return
    total = 0
    for path, raw in strings:
        total += structure(raw, ARGUMENTS_MAX_VALUES)[0]
        if total > ARGUMENTS_MAX_VALUES:
            raise TranslationError(
                path, f"Tool-call arguments may hold at most {ARGUMENTS_MAX_VALUES:,} keys and values, in all calls."
            )


def _openai_messages(messages: list[Any]) -> tuple[list[Json], list[Json]]:
    """System text blocks, and the alternating user/assistant turns (same-role neighbours merged)."""
    system: list[Json] = []
    turns: list[Json] = []
    for i, message in enumerate(messages):
        path = f"messages[{i}]"
        if not isinstance(message, dict):
            raise TranslationError(path, "Each message must be an object.")
        role = message.get("role")
        if role in ("system", "developer"):
            system.extend(_openai_text_blocks(message.get("content"), f"{path}.content"))
            continue
        if role == "user":
            blocks = _openai_user_blocks(message.get("content"), f"{path}.content")
        elif role == "assistant":
            blocks = _openai_assistant_blocks(message, path)
        elif role == "tool":
            role, blocks = "user", [_openai_tool_result(message, path)]
        else:
            raise TranslationError(f"{path}.role", f"Role {role!r} has no equivalent in the Anthropic Messages API.")
        _append_turn(turns, role, blocks)
    _trim_prefill(turns)
    return system, [_collapse(turn) for turn in turns]


def _append_turn(turns: list[Json], role: str, blocks: list[Json]) -> None:
    """Anthropic requires user and assistant to alternate, so a same-role neighbour joins the previous turn."""
    if not blocks:
        return
    if turns and turns[-1]["role"] == role:
        turns[-1]["content"].extend(blocks)
    else:
        turns.append({"role": role, "content": list(blocks)})


def _trim_prefill(turns: list[Json]) -> None:
    """Anthropic refuses a final assistant turn (a prefill) that ends in whitespace; the model continues it the same."""
    if not turns or turns[-1]["role"] != "assistant" or turns[-1]["content"][-1]["type"] != "text":
        return
    content = turns[-1]["content"]
    text = content[-1]["text"].rstrip()
    if text:
        content[-1] = {"type": "text", "text": text}
    else:
        content.pop()
        if not content:
            turns.pop()


def _collapse(turn: Json) -> Json:
    """A turn that is one text block is sent as a plain string, the way a client would write it."""
    content = turn["content"]
    if len(content) == 1 and content[0]["type"] == "text":
        return {"role": turn["role"], "content": content[0]["text"]}
    return turn


def _openai_text_blocks(content: Any, path: str) -> list[Json]:
    """Text-only content (system, developer, tool results): a string or text parts; empty text is left out."""
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return [block for j, part in enumerate(_list(content, path)) for block in _openai_text_part(part, f"{path}[{j}]")]


def _openai_text_part(part: Any, path: str) -> list[Json]:
    """A text (or assistant refusal) part as a text block; none for empty text, which Anthropic refuses."""
    if not isinstance(part, dict) or part.get("type") not in ("text", "refusal"):
        kind = part.get("type") if isinstance(part, dict) else None
        raise TranslationError(f"{path}.type", f"Content part type {kind!r} has no equivalent in the Anthropic API.")
    text = part.get("text") if part["type"] == "text" else part.get("refusal")
    if not isinstance(text, str):
        raise TranslationError(f"{path}.text", "A text part needs a string.")
    return [{"type": "text", "text": text}] if text else []


def _openai_user_blocks(content: Any, path: str) -> list[Json]:
    if content is None or isinstance(content, str):
        return _openai_text_blocks(content, path)
    blocks = []
    for j, part in enumerate(_list(content, path)):
        if isinstance(part, dict) and part.get("type") == "image_url":
            blocks.append(_openai_image(part.get("image_url"), f"{path}[{j}].image_url"))
        else:
            blocks.extend(_openai_text_part(part, f"{path}[{j}]"))
    return blocks


def _openai_image(image: Any, path: str) -> Json:
    """A data: URL becomes base64 image data, an http(s) URL an image by URL; `detail` has no equivalent."""
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        raise TranslationError(f"{path}.url", "An image part needs a URL.")
    if url.startswith(("https://", "http://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    match = _DATA_URL.match(url)
    if match is None:
        raise TranslationError(f"{path}.url", "An image must be an http(s) URL or a base64 data: URL.")
    media = match["media"].lower()
    if media not in ANTHROPIC_IMAGE_TYPES:
        allowed = ", ".join(sorted(ANTHROPIC_IMAGE_TYPES))
        raise TranslationError(f"{path}.url", f"Image type {media} is not accepted by the Anthropic API ({allowed}).")
    return {"type": "image", "source": {"type": "base64", "media_type": media, "data": match["data"]}}


def _openai_assistant_blocks(message: Json, path: str) -> list[Json]:
    for param in ("function_call", "audio"):
        if message.get(param) is not None:
            raise TranslationError(f"{path}.{param}", f"An assistant `{param}` has no equivalent in the Anthropic API.")
    blocks = _openai_text_blocks(message.get("content"), f"{path}.content")
    calls = message.get("tool_calls") or []
    for j, call in enumerate(_list(calls, f"{path}.tool_calls")):
        blocks.append(_openai_tool_use(call, f"{path}.tool_calls[{j}]"))
    return blocks


def _openai_tool_use(call: Any, path: str) -> Json:
    """An assistant tool call as a tool_use block: same id, the arguments string parsed into an object."""
    if not isinstance(call, dict) or call.get("type", "function") != "function":
        raise TranslationError(f"{path}.type", "Only function tool calls are accepted.")
    function = as_object(call.get("function"))
    call_id, name = call.get("id"), function.get("name")
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise TranslationError(path, "A tool call needs a string id and function.name.")
    return {"type": "tool_use", "id": call_id, "name": name, "input": parse_arguments(function.get("arguments"), path)}


def parse_arguments(arguments: Any, path: str) -> Json:
    """Tool-call arguments (a JSON string) as the object Anthropic's `input` must be; "" means no arguments.

    A string is one value to the body's own limits, so its contents meet the same ones here before they become
    objects: strict JSON (no NaN), at most ARGUMENTS_MAX_VALUES keys and values and ARGUMENTS_MAX_DEPTH levels. An
    integer beyond 64 bits stays exact (orjson would read it as a float): write the result with `dumps`.
    """
    if arguments is None or arguments == "":
        return {}
    where = f"{path}.function.arguments"
    if not isinstance(arguments, str):
        raise TranslationError(where, "Tool-call arguments must be a JSON object.")
    raw = arguments.encode("utf-8", "surrogatepass")
    if estimate(raw) > ARGUMENTS_MAX_VALUES and structure(raw, ARGUMENTS_MAX_VALUES)[0] > ARGUMENTS_MAX_VALUES:
        raise TranslationError(where, f"Tool-call arguments may hold at most {ARGUMENTS_MAX_VALUES:,} keys and values.")
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        raise TranslationError(where, "Tool-call arguments must be a JSON object.")
    if _deeper_than(parsed, ARGUMENTS_MAX_DEPTH):
        raise TranslationError(where, f"Tool-call arguments may nest at most {ARGUMENTS_MAX_DEPTH} levels.")
    if wide_numbers(raw):
        exact: Json = json.loads(arguments)  # valid JSON of bounded depth (orjson read it): its integers exact
        return exact
    return parsed


def dumps(value: Any) -> bytes:
    """`value` as JSON bytes: orjson's, or json's when it holds an integer beyond 64 bits (tool-call arguments
    parsed by `parse_arguments`), which orjson cannot write."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return json.dumps(value, separators=(",", ":")).encode()  # ASCII: a lone surrogate is escaped, not an error


def _deeper_than(value: Json, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if type(item) is dict else item
        stack.extend((child, depth + 1) for child in children if type(child) is dict or type(child) is list)
    return False


def _openai_tool_result(message: Json, path: str) -> Json:
    call_id = message.get("tool_call_id")
    if not isinstance(call_id, str):
        raise TranslationError(f"{path}.tool_call_id", "A tool message needs its tool_call_id.")
    content = message.get("content")
    if content is None or isinstance(content, str):
        return {"type": "tool_result", "tool_use_id": call_id, "content": content or ""}
    return {"type": "tool_result", "tool_use_id": call_id, "content": _openai_text_blocks(content, f"{path}.content")}


def _openai_tool(tool: Any, path: str) -> Json:
    """A function tool as an Anthropic tool. `strict` is dropped: Anthropic validates tool input on its own terms."""
    if (
        not isinstance(tool, dict)
        or tool.get("type", "function") != "function"
        or not isinstance(tool.get("function"), dict)
    ):
        raise TranslationError(f"{path}.type", "Only function tools can be sent to the Anthropic API.")
    function = tool["function"]
    if not isinstance(function.get("name"), str):
        raise TranslationError(f"{path}.function.name", "A tool needs a name.")
    out: Json = {"name": function["name"]}
    if function.get("description"):
        out["description"] = function["description"]
    out["input_schema"] = function.get("parameters") or {"type": "object", "properties": {}}
    return out


def _openai_tool_choice(choice: Any, parallel: Any) -> Json | None:
    """auto/none/required/a named function, plus parallel_tool_calls=false as disable_parallel_tool_use."""
    if choice is None:
        out: Json | None = None
    elif choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        name = as_object(choice.get("function")).get("name")
        if not isinstance(name, str):
            raise TranslationError("tool_choice.function.name", "A named tool_choice needs a function name.")
        out = {"type": "tool", "name": name}
    else:
        raise TranslationError("tool_choice", f"tool_choice {choice!r} has no equivalent in the Anthropic API.")
    if parallel is False:
        if out is None:
            out = {"type": "auto"}
        if out["type"] != "none":
            out["disable_parallel_tool_use"] = True
    return out


# ---------------------------------------------------------------- Anthropic request -> OpenAI request


def anthropic_to_openai_request(
    payload: Json, *, max_tokens_param: Literal["max_tokens", "max_completion_tokens"] = "max_completion_tokens"
) -> Json:
    """A Messages request as an OpenAI chat request. `max_tokens_param` names the field the upstream reads."""
    _check_params(payload, _ANTHROPIC_TRANSLATED, ANTHROPIC_DROPPABLE, "OpenAI Chat Completions")
    messages = _anthropic_system(payload.get("system"))
    for i, message in enumerate(_list(payload.get("messages"), "messages")):
        messages.extend(_anthropic_message(message, f"messages[{i}]"))
    out: Json = {"model": payload.get("model"), "messages": messages}
    if payload.get("max_tokens") is not None:
        out[max_tokens_param] = payload["max_tokens"]
    if payload.get("temperature") is not None:
        # Anthropic's own range, whichever protocol serves the request: a request an OpenAI upstream would take
        # would be refused by the chain's Anthropic entries, or by Anthropic itself.
        out["temperature"] = _anthropic_temperature(payload["temperature"], "in an Anthropic Messages request")
    if payload.get("top_p") is not None:
        out["top_p"] = payload["top_p"]
    if payload.get("stop_sequences"):
        out["stop"] = list(_list(payload["stop_sequences"], "stop_sequences"))
    if payload.get("stream") is not None and _boolean(payload["stream"], "stream"):
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    if payload.get("tools"):
        tools = _list(payload["tools"], "tools")
        out["tools"] = [_anthropic_tool(tool, f"tools[{i}]") for i, tool in enumerate(tools)]
    out.update(_anthropic_tool_choice(payload.get("tool_choice")))
    user = as_object(payload.get("metadata")).get("user_id")
    if isinstance(user, str) and user:
        out["user"] = user
    return out


def _anthropic_system(system: Any) -> list[Json]:
    """The system prompt as one system message; `cache_control` on its blocks has no equivalent and is dropped."""
    if not system:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}]
    parts = []
    for j, block in enumerate(_list(system, "system")):
        if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
            raise TranslationError(f"system[{j}]", "System blocks must be text.")
        parts.append({"type": "text", "text": block["text"]})
    return [{"role": "system", "content": _parts_content(parts)}]


def _parts_content(parts: list[Json]) -> Any:
    """One text part reads as a plain string; several stay parts so their boundaries survive."""
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def _anthropic_message(message: Any, path: str) -> list[Json]:
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise TranslationError(f"{path}.role", "Messages must have the role user or assistant.")
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _list(content, f"{path}.content")
    if message["role"] == "assistant":
        return _anthropic_assistant(blocks, f"{path}.content")
    return _anthropic_user(blocks, f"{path}.content")


def _anthropic_user(blocks: list[Any], path: str) -> list[Json]:
    """tool_result blocks become tool messages, in place; text and images between them become user messages."""
    out: list[Json] = []
    parts: list[Json] = []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "tool_result":
            if parts:
                out.append({"role": "user", "content": _parts_content(parts)})
                parts = []
            out.append(_anthropic_tool_result(block, f"{path}[{j}]"))
        elif kind == "text":
            parts.append({"type": "text", "text": _text(block, f"{path}[{j}]")})
        elif kind == "image":
            parts.append(_anthropic_image(block, f"{path}[{j}]"))
        else:
            raise TranslationError(f"{path}[{j}].type", f"Content type {kind!r} has no equivalent in the OpenAI API.")
    if parts:
        out.append({"role": "user", "content": _parts_content(parts)})
    return out


def _text(block: Json, path: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise TranslationError(f"{path}.text", "A text block needs a string.")
    return text


def _anthropic_image(block: Json, path: str) -> Json:
    source = as_object(block.get("source"))
    if source.get("type") == "base64":
        media, data = source.get("media_type"), source.get("data")
        if not isinstance(media, str) or not media or not isinstance(data, str):
            raise TranslationError(f"{path}.source", "A base64 image source needs a string media_type and data.")
        url = f"data:{media};base64,{data}"
    elif source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise TranslationError(f"{path}.source.type", "Only base64 and url image sources can be sent to an OpenAI API.")
    return {"type": "image_url", "image_url": {"url": url}}


def _anthropic_tool_result(block: Json, path: str) -> Json:
    """A tool message with the same id. `is_error` is dropped: the result's own text says what went wrong."""
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str):
        raise TranslationError(f"{path}.tool_use_id", "A tool_result needs its tool_use_id.")
    content = block.get("content")
    if content is None or isinstance(content, str):
        return {"role": "tool", "tool_call_id": call_id, "content": content or ""}
    parts = []
    for k, item in enumerate(_list(content, f"{path}.content")):
        if not isinstance(item, dict) or item.get("type") != "text":
            raise TranslationError(f"{path}.content[{k}].type", "OpenAI tool messages carry text only.")
        parts.append({"type": "text", "text": _text(item, f"{path}.content[{k}]")})
    return {"role": "tool", "tool_call_id": call_id, "content": _parts_content(parts) if parts else ""}


def _anthropic_assistant(blocks: list[Any], path: str) -> list[Json]:
    """Text and tool_use blocks as one assistant message; thinking blocks are the model's own notes and are dropped."""
    parts: list[Json] = []
    calls: list[Json] = []
    for j, block in enumerate(blocks):
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, f"{path}[{j}]")})
        elif kind == "tool_use":
            calls.append(_anthropic_tool_call(block, f"{path}[{j}]"))
        elif kind not in ("thinking", "redacted_thinking"):
            raise TranslationError(f"{path}[{j}].type", f"Content type {kind!r} has no equivalent in the OpenAI API.")
    message: Json = {"role": "assistant", "content": _parts_content(parts) if parts else None}
    if calls:
        message["tool_calls"] = calls
    return [message] if parts or calls else []


def _anthropic_tool_call(block: Json, path: str) -> Json:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not isinstance(name, str) or not isinstance(arguments, dict):
        raise TranslationError(path, "A tool_use block needs a string id and name and an object input.")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": dump_arguments(arguments)}}


def dump_arguments(arguments: Json) -> str:
    """Tool input as OpenAI's arguments string, compact and in UTF-8 the way OpenAI models write it."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


def _anthropic_tool(tool: Any, path: str) -> Json:
    """A client tool as a function tool. Anthropic's server tools (web search, bash, ...) cannot run elsewhere."""
    if not isinstance(tool, dict) or tool.get("type", "custom") != "custom":
        kind = tool.get("type") if isinstance(tool, dict) else None
        raise TranslationError(f"{path}.type", f"Tool type {kind!r} has no equivalent in the OpenAI API.")
    if not isinstance(tool.get("name"), str):
        raise TranslationError(f"{path}.name", "A tool needs a name.")
    function: Json = {"name": tool["name"]}
    if tool.get("description"):
        function["description"] = tool["description"]
    function["parameters"] = tool.get("input_schema") or {"type": "object", "properties": {}}
    return {"type": "function", "function": function}


def _anthropic_tool_choice(choice: Any) -> Json:
    """tool_choice and parallel_tool_calls for an Anthropic tool_choice (auto/any/tool/none)."""
    if choice is None:
        return {}
    kind = choice.get("type") if isinstance(choice, dict) else None
    out: Json
    if kind in ("auto", "none"):
        out = {"tool_choice": kind}
    elif kind == "any":
        out = {"tool_choice": "required"}
    elif kind == "tool" and isinstance(choice.get("name"), str):
        out = {"tool_choice": {"type": "function", "function": {"name": choice["name"]}}}
    else:
        raise TranslationError("tool_choice", f"tool_choice {choice!r} has no equivalent in the OpenAI API.")
    if choice.get("disable_parallel_tool_use") and kind != "none":
        out["parallel_tool_calls"] = False
    return out


# ---------------------------------------------------------------- responses


def anthropic_to_openai_response(body: Json, *, model: str | None = None, created: int | None = None) -> Json:
    """A Messages response as a chat.completion: text joined, tool_use as tool_calls, usage renamed."""
    text: list[str] = []
    calls: list[Json] = []
    for block in map(as_object, body.get("content") or []):
        if block.get("type") == "text":
            text.append(block.get("text") or "")
        elif block.get("type") == "tool_use":
            calls.append(_anthropic_tool_call(block, "content"))
    message: Json = {"role": "assistant", "content": "".join(text) if text else None, "refusal": None}
    if calls:
        message["tool_calls"] = calls
    stop = body.get("stop_reason")
    finish = STOP_TO_FINISH.get(stop, "stop") if isinstance(stop, str) else "stop"  # not a string: absent
    return {
        "id": body.get("id"),
        "object": "chat.completion",
        "created": int(time.time()) if created is None else created,
        "model": model or body.get("model"),
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": anthropic_usage_to_openai(as_object(body.get("usage"))),
    }


def anthropic_usage_to_openai(usage: Json) -> Json:
    """OpenAI's prompt_tokens include cached tokens; Anthropic's input_tokens exclude cache reads and writes."""
    cached = max(as_count(usage.get("cache_read_input_tokens")), 0)
    prompt = max(as_count(usage.get("input_tokens")), 0) + max(as_count(usage.get("cache_creation_input_tokens")), 0)
    prompt += cached
    completion = max(as_count(usage.get("output_tokens")), 0)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def openai_usage_to_anthropic(usage: Json) -> Json:
    """The reverse of `anthropic_usage_to_openai`: cached prompt tokens are reported as cache reads."""
    cached = max(as_count(as_object(usage.get("prompt_tokens_details")).get("cached_tokens")), 0)
    return {
        "input_tokens": max(as_count(usage.get("prompt_tokens")) - cached, 0),
        "output_tokens": max(as_count(usage.get("completion_tokens")), 0),
        "cache_read_input_tokens": cached,
    }


def openai_to_anthropic_response(body: Json, *, model: str | None = None) -> Json:
    """A chat.completion (its first choice) as a Messages response.

    Tool-call arguments that are not a JSON object cannot become Anthropic's `input`: that raises
    TranslationError, which the caller reports as an upstream failure rather than inventing an input.
    """
    choices = body.get("choices") or [{}]
    choice = as_object(choices[0])
    message = as_object(choice.get("message"))
    content: list[Json] = [{"type": "text", "text": text} for text in _openai_response_text(message) if text]
    for j, call in enumerate(message.get("tool_calls") or []):
        content.append(_openai_tool_use(call, f"choices[0].message.tool_calls[{j}]"))
    stop = (
        "refusal" if message.get("refusal") else FINISH_TO_STOP.get(choice.get("finish_reason") or "stop", "end_turn")
    )
    return {
        "id": body.get("id"),
        "type": "message",
        "role": "assistant",
        "model": model or body.get("model"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": openai_usage_to_anthropic(as_object(body.get("usage"))),
    }


def _openai_response_text(message: Json) -> list[str]:
    """The assistant's text: its content (a string, or parts from some compatible servers) and any refusal."""
    content = message.get("content")
    if isinstance(content, str):
        texts = [content]
    elif isinstance(content, list):
        texts = [part.get("text") or "" for part in content if isinstance(part, dict) and part.get("type") == "text"]
    else:
        texts = []
    if isinstance(message.get("refusal"), str):
        texts.append(message["refusal"])
    return texts


def _list(value: Any, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise TranslationError(path, f"`{path}` must be an array.")
    return value
