"""Streams, one event at a time, in both directions, and the SSE framing of each protocol.

Anthropic streams content blocks (`content_block_start` / `_delta` / `_stop`, each with an index);
OpenAI streams deltas of one message (`content`, `tool_calls[k]` with `arguments` pieces). The
converters keep the little state the mapping needs (which block is open, which tool-call index an
Anthropic block is, the usage so far) and never buffer content: each piece goes out as soon as it
arrives, so a translated stream is as live as the original.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from gateway.translate.anthropic import (
    FINISH_TO_STOP,
    STOP_TO_FINISH,
    anthropic_usage_to_openai,
    dump_arguments,
    openai_usage_to_anthropic,
)
from gateway.translate.errors import (
    Json,
    TranslationError,
    anthropic_stream_error,
    as_count,
    as_object,
    openai_stream_error,
)

Event = tuple[str, Json]

OPENAI_SSE_DONE = b"data: [DONE]\n\n"


def openai_sse(chunk: Json) -> bytes:
    """One OpenAI stream chunk (or error) as an SSE `data:` event."""
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def anthropic_sse(event: str, data: Json) -> bytes:
    """One Anthropic stream event: the event name on its own line, then its data."""
    return b"event: " + event.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


class AnthropicToOpenAIStream:
    """An Anthropic Messages stream, fed event by event, as OpenAI chat.completion.chunk dicts.

    `feed` returns the chunks to send (often none: `ping`, `content_block_stop`). An `error` event
    comes back as `{"error": {...}}`, which the caller sends as its last event instead of `[DONE]`.
    With `include_usage` (the client's `stream_options.include_usage`), `message_stop` yields a last
    chunk with `choices: []` and the usage, as OpenAI sends it.
    """

    def __init__(self, model: str, *, include_usage: bool = False, created: int | None = None) -> None:
        self.model = model
        self.include_usage = include_usage
        self._usage_sent = False
        self.created = int(time.time()) if created is None else created
        self.id = ""
        self.finish_reason: str | None = None
        self.done = False
        self._usage: Json = {}
        self._tool_index: dict[int, int] = {}  # Anthropic block index -> OpenAI tool_calls index

    @property
    def usage(self) -> Json:
        """The usage so far, in OpenAI's terms (Anthropic reports output tokens cumulatively)."""
        return anthropic_usage_to_openai(self._usage)

    def feed(self, event: str, data: Json) -> list[Json]:
        handlers = {
            "message_start": self._on_message_start,
            "content_block_start": self._on_content_block_start,
            "content_block_delta": self._on_content_block_delta,
            "message_delta": self._on_message_delta,
            "message_stop": self._on_message_stop,
            "error": self._on_error,
        }
        handler = handlers.get(event or data.get("type") or "")
        if handler is None or self.done:
            return []  # ping, content_block_stop, and any event type Anthropic adds later
        return handler(data)

    def _on_message_start(self, data: Json) -> list[Json]:
        message = as_object(data.get("message"))
        self.id = message.get("id") or self.id
        self._add_usage(message.get("usage"))
        return [self._chunk({"role": "assistant", "content": ""})]

    def _on_content_block_start(self, data: Json) -> list[Json]:
        block = as_object(data.get("content_block"))
        if block.get("type") == "text":
            return [self._chunk({"content": block["text"]})] if block.get("text") else []
        if block.get("type") != "tool_use":
            return []  # thinking and server-tool blocks have no OpenAI delta
        position = len(self._tool_index)
        self._tool_index[as_count(data.get("index"))] = position
        call = {
            "index": position,
            "id": block.get("id"),
            "type": "function",
            "function": {
                "name": block.get("name"),
                "arguments": dump_arguments(block["input"]) if block.get("input") else "",
            },
        }
        return [self._chunk({"tool_calls": [call]})]

    def _on_content_block_delta(self, data: Json) -> list[Json]:
        delta = as_object(data.get("delta"))
        if delta.get("type") == "text_delta" and delta.get("text"):
            return [self._chunk({"content": delta["text"]})]
        position = self._tool_index.get(as_count(data.get("index")))
        if delta.get("type") == "input_json_delta" and position is not None and delta.get("partial_json"):
            return [
                self._chunk({"tool_calls": [{"index": position, "function": {"arguments": delta["partial_json"]}}]})
            ]
        return []

    def _on_message_delta(self, data: Json) -> list[Json]:
        self._add_usage(data.get("usage"))
        stop = as_object(data.get("delta")).get("stop_reason")
        if not stop or not isinstance(stop, str):  # one that is not a string reads as absent
            return []
        self.finish_reason = STOP_TO_FINISH.get(stop, "stop")
        # The usage is final here (message_delta carries the output count): sent at once, so a stream the
        # upstream then holds open, or cuts before its message_stop, has delivered it.
        return [self._chunk({}, finish_reason=self.finish_reason), *self._usage_chunk()]

    def _on_message_stop(self, _data: Json) -> list[Json]:
        self.done = True
        chunks = [] if self.finish_reason else [self._chunk({}, finish_reason="stop")]
        return [*chunks, *self._usage_chunk()]

    def _usage_chunk(self) -> list[Json]:
        """The usage chunk (with include_usage), once."""
        if not self.include_usage or self._usage_sent:
            return []
        self._usage_sent = True
        return [{**self._envelope(), "choices": [], "usage": self.usage}]

    def _on_error(self, data: Json) -> list[Json]:
        self.done = True
        return [anthropic_stream_error(data)]

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self._usage.update({key: value for key, value in usage.items() if isinstance(value, int)})

    def _envelope(self) -> Json:
        return {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model}

    def _chunk(self, delta: Json, *, finish_reason: str | None = None) -> Json:
        chunk = {
            **self._envelope(),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        }
        if self.include_usage:
            chunk["usage"] = None  # OpenAI's chunks say null until the last one
        return chunk


class OpenAIToAnthropicStream:
    """An OpenAI chat stream, fed chunk by chunk, as Anthropic (event, data) pairs.

    Content deltas open a text block, each new tool-call index a tool_use block whose `arguments`
    pieces become `input_json_delta`s; a block closes when the next one opens. The message ends
    (`message_delta` with the stop reason and usage, then `message_stop`) once both the finish
    reason and the usage chunk have arrived, or at `finish()` when the upstream stream ended.
    """

    def __init__(self, model: str, *, message_id: str | None = None) -> None:
        self.model = model
        self.id = message_id
        self.stop_reason: str | None = None
        self.done = False
        self._started = False
        self._usage: Json | None = None
        self._next_index = 0
        self._open: tuple[str, int] | None = None  # ("text", -1) or ("tool", OpenAI tool index)
        self._tools_seen: set[int] = set()
        self._refused = False

    def feed(self, chunk: Json) -> list[Event]:
        if self.done:
            return []
        if isinstance(chunk.get("error"), dict):
            self.done = True
            return [("error", openai_stream_error(chunk["error"]))]
        events = self._start(chunk)
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events.extend(self._choice(choice))
        if self.stop_reason is not None and self._usage is not None:
            events.extend(self._end())
        return events

    def finish(self) -> list[Event]:
        """Close a stream whose upstream ended ([DONE] or end of body) without the events still owed."""
        if self.done:
            return []
        return self._start({}) + self._end()

    def _start(self, chunk: Json) -> list[Event]:
        if self._started:
            return []
        self._started = True
        self.id = self.id or chunk.get("id") or "msg_gateway"
        message: Json = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0},
        }
        return [("message_start", {"type": "message_start", "message": message})]

    def _choice(self, choice: Json) -> list[Event]:
        delta = as_object(choice.get("delta"))
        events: list[Event] = []
        for text in (delta.get("content"), delta.get("refusal")):
            if isinstance(text, str) and text:
                events.extend(self._text(text))
        if delta.get("refusal"):
            self._refused = True  # the stop reason once the choice finishes: more of the refusal may follow
        calls = delta.get("tool_calls")
        for j, call in enumerate(calls if isinstance(calls, list) else ()):
            if isinstance(call, dict):
                events.extend(self._tool(call, j))
        finish = choice.get("finish_reason")
        if finish:
            events.extend(self._close())
            self.stop_reason = "refusal" if self._refused else FINISH_TO_STOP.get(finish, "end_turn")
        return events

    def _text(self, text: str) -> list[Event]:
        events = [] if self._open == ("text", -1) else self._open_block(("text", -1), {"type": "text", "text": ""})
        delta = {"type": "text_delta", "text": text}
        return [*events, ("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})]

    def _tool(self, call: Json, j: int) -> list[Event]:
        position = as_count(call.get("index"), j)
        function = as_object(call.get("function"))
        events: list[Event] = []
        if position not in self._tools_seen:
            self._tools_seen.add(position)
            block = {
                "type": "tool_use",
                "id": call.get("id") or f"toolu_{position}",
                "name": function.get("name") or "",
            }
            events = self._open_block(("tool", position), {**block, "input": {}})
        elif self._open != ("tool", position):
            raise TranslationError(
                f"choices[0].delta.tool_calls[{j}]", "Tool-call arguments interleaved across calls cannot be streamed."
            )
        if function.get("arguments"):
            delta = {"type": "input_json_delta", "partial_json": function["arguments"]}
            events.append(
                ("content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta})
            )
        return events

    @property
    def _index(self) -> int:
        """The index of the open block (blocks are numbered in the order they open)."""
        return self._next_index - 1

    def _open_block(self, key: tuple[str, int], block: Json) -> list[Event]:
        events = self._close()
        self._open = key
        self._next_index += 1
        return [
            *events,
            ("content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block}),
        ]

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def _end(self) -> list[Event]:
        self.done = True
        usage = openai_usage_to_anthropic(self._usage or {})
        stop = self.stop_reason or ("refusal" if self._refused else "end_turn")
        delta = {"stop_reason": stop, "stop_sequence": None}
        return [
            *self._close(),
            ("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}),
            ("message_stop", {"type": "message_stop"}),
        ]
