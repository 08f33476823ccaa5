"""Bounds on a chat request's body, checked before the parse can allocate what a hostile body multiplies.

A 10 MiB body of `{},{},...` is 3.5 million dicts once parsed (over 300 MB); short strings, floats
and keys multiply the same way. So the body's keys and values are counted first, at C speed on
the raw bytes (`count`, `split`, `join`; strings are cut out so that braces and commas inside them
do not count), and a body over the limit is refused without being parsed. The parsed object is then
checked exactly: depth, string lengths, messages, content parts, tools, and whether it holds every
key the text has (a repeated key, however it is spelt, e.g. `"mod\\u0065l"`, leaves fewer).

Large bodies are parsed in a worker thread, one at a time (see GatewayApp._parse), and a worker's
large bodies share one byte budget (BodyBudget), so a burst of maximal bodies queues instead of
multiplying the worker's memory.
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

import orjson

MIB = 1024 * 1024
# Every byte but the four that open a container or separate values and keys.
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b"{[,:")


@dataclass(frozen=True)
class BodyLimits:
    """Defaults are the OpenAI API's own limits where it documents one, and never below them."""

    max_messages: int = 2048  # OpenAI and Azure OpenAI refuse more
    max_content_parts: int = 2048  # per message; no provider documents a limit this low
    max_tools: int = 128  # OpenAI's limit on `tools`, `functions` and one message's `tool_calls`
    max_depth: int = 64  # nesting of objects and arrays; structured-output schemas allow 10 levels
    max_values: int = 100_000  # keys and values in the whole body
    max_string_chars: int = 10 * MIB  # one string (OpenAI: 10,485,760 characters)
    # Bodies larger than this are parsed in a worker thread and charged to the body budget.
    large_body: int = 256 * 1024

    @classmethod
    def from_settings(cls, settings: Any) -> BodyLimits:
        defaults = cls()
        return cls(
            max_messages=getattr(settings, "GATEWAY_MAX_MESSAGES", defaults.max_messages),
            max_content_parts=getattr(settings, "GATEWAY_MAX_CONTENT_PARTS", defaults.max_content_parts),
            max_tools=getattr(settings, "GATEWAY_MAX_TOOLS", defaults.max_tools),
            max_depth=getattr(settings, "GATEWAY_MAX_JSON_DEPTH", defaults.max_depth),
            max_values=getattr(settings, "GATEWAY_MAX_JSON_VALUES", defaults.max_values),
            max_string_chars=getattr(settings, "GATEWAY_MAX_STRING_CHARS", defaults.max_string_chars),
        )


class BodyError(Exception):
    """A body the gateway refuses with 400: message, OpenAI-style code and the offending parameter."""

    def __init__(self, message: str, *, code: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.code, self.param = message, code, param


def structure(raw: bytes, max_values: int) -> tuple[int, int]:
    """(keys and values, keys) that the JSON text `raw` holds; exact for valid JSON, an upper bound otherwise.

    Counts only what lies outside strings: every value but the first of a container follows a comma,
    every key a colon. Stops early (returning a count over `max_values`) when the strings alone are
    too many, so that cutting them out never allocates more than `max_values` pieces.
    """
    # Escapes first: `\\` pairs, then `\"`, so that every quote left delimits a string.
    text = raw
    if text.find(b"\\") >= 0:  # one memchr pass; the pair searches below are slower
        if b"\\\\" in text:
            text = text.replace(b"\\\\", b"")
        if b'\\"' in text:
            text = text.replace(b'\\"', b"")
    strings = text.count(b'"') // 2
    if strings > max_values:
        return strings, 0
    outside = b"".join(text.split(b'"')[::2]) if strings else text
    # What is left of the text outside strings is the structure: one byte per container, comma and colon.
    marks = outside.translate(None, _NOT_STRUCTURE)
    values = 1 + len(marks)
    keys = marks.count(b":") if values <= max_values else 0
    return values, keys


def parse_body(raw: bytes, limits: BodyLimits) -> tuple[dict[str, Any], bool]:
    """Parse and check a chat body. Returns (payload, repeated_keys); raises BodyError.

    `repeated_keys` is true when the text holds a key twice in one object: the parsed object kept
    the last one, and only a re-serialised body says exactly that to the upstream.
    """
    values, keys = structure(raw, limits.max_values)
    if values > limits.max_values:
        raise BodyError(
            f"The request body holds more than {limits.max_values:,} JSON keys and values; "
            "send fewer messages, content parts or tools.",
            code="too_many_json_values",
        )
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BodyError(f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(payload, dict):
        raise BodyError("The request body must be a JSON object.", code="invalid_json")
    parsed_keys = _walk(payload, limits)
    _check_chat(payload, limits)
    return payload, parsed_keys != keys


def _walk(payload: dict[str, Any], limits: BodyLimits) -> int:
    """Check depth and string lengths everywhere; return how many keys the parsed object holds."""
    max_depth, max_chars = limits.max_depth, limits.max_string_chars
    keys = 0
    stack: list[tuple[Any, int]] = [(payload, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            _fail_depth(payload, limits)
        if type(value) is dict:
            keys += len(value)
            items = value.values()
            for key in value:
                if len(key) > max_chars:
                    _fail_string(payload, limits)
        else:
            items = value
        for item in items:
            kind = type(item)
            if kind is dict or kind is list:
                stack.append((item, depth + 1))
            elif kind is str and len(item) > max_chars:
                _fail_string(payload, limits)
    return keys


def _check_chat(payload: dict[str, Any], limits: BodyLimits) -> None:
    messages = payload.get("messages")
    if isinstance(messages, list):
        if len(messages) > limits.max_messages:
            raise _too_long("messages", len(messages), limits.max_messages)
        for index, message in enumerate(messages):
            if not isinstance(message, dict):
                continue
            content = message.get("content")
            if isinstance(content, list) and len(content) > limits.max_content_parts:
                raise _too_long(f"messages[{index}].content", len(content), limits.max_content_parts)
            calls = message.get("tool_calls")
            if isinstance(calls, list) and len(calls) > limits.max_tools:
                raise _too_long(f"messages[{index}].tool_calls", len(calls), limits.max_tools)
    for name in ("tools", "functions"):
        value = payload.get(name)
        if isinstance(value, list) and len(value) > limits.max_tools:
            raise _too_long(name, len(value), limits.max_tools)


def _too_long(param: str, length: int, limit: int) -> BodyError:
    return BodyError(
        f"Invalid '{param}': array too long. Expected an array with maximum length {limit:,}, "
        f"but got an array with length {length:,} instead.",
        code="array_above_max_length",
        param=param,
    )


def _fail_depth(payload: Any, limits: BodyLimits) -> None:
    path = _find(payload, lambda value, depth: depth > limits.max_depth and isinstance(value, (dict, list)))
    raise BodyError(
        f"The request body nests objects and arrays more than {limits.max_depth} levels deep (at '{path}').",
        code="json_too_deep",
        param=path,
    )


def _fail_string(payload: Any, limits: BodyLimits) -> None:
    path = _find(payload, lambda value, depth: isinstance(value, str) and len(value) > limits.max_string_chars)
    raise BodyError(
        f"Invalid '{path}': string too long. Expected a string with maximum length {limits.max_string_chars:,}.",
        code="string_above_max_length",
        param=path,
    )


def _find(payload: Any, bad: Any) -> str:
    """Path (`messages[3].content`) of the first value `bad(value, depth)` flags; only on the error path.

    Object keys are checked as strings too: a key too long is reported at the object holding it.
    """
    stack: list[tuple[Any, int, str]] = [(payload, 1, "")]
    while stack:
        value, depth, path = stack.pop()
        if bad(value, depth):
            return path or "(body)"
        if isinstance(value, dict):
            for key, item in value.items():
                if bad(key, depth):
                    return path or "(body)"
                stack.append((item, depth + 1, f"{path}.{key}" if path else key))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, f"{path}[{i}]") for i, item in enumerate(value))
    return "(body)"


class BodyBudget:
    """Bytes of large request bodies one worker holds at once; requests past it wait their turn (FIFO)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, size: int, timeout: float) -> int:
        """Take `size` bytes (at most the capacity); raises TimeoutError after `timeout` seconds."""
        size = min(size, self.capacity)
        if not self._waiters and self.free >= size:
            self.free -= size
            return size
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, waiter)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(timeout):
                await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.release(size)  # granted just as we gave up: give it back
            else:
                self._waiters.remove(entry)
                self._wake()  # the head of the queue may fit now
            raise
        return size

    def release(self, size: int) -> None:
        self.free += size
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.free >= self._waiters[0][0]:
            size, waiter = self._waiters.popleft()
            if waiter.done():
                continue
            self.free -= size
            waiter.set_result(None)
