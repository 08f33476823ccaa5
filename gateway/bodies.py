"""Bounds on a chat request's body, checked before the parse can allocate what a hostile body multiplies.

A 10 MiB body of `{},{},...` is 3.5 million dicts once parsed (over 300 MB); short strings, floats
and keys multiply the same way. So a body that could hold too many is counted first, at C speed on
the raw bytes (`count`, `split`, `join`; strings are cut out so that braces and commas inside them
do not count), and a body over the limit is refused without being parsed. The parsed object is then
checked exactly: depth, string lengths, messages, content parts, tools, and whether it holds every
key the text has: a key repeated in one object, however it is spelt (e.g. `"mod\\u0065l"`), is a 400,
so the bytes that go upstream always say exactly what was validated.

Large or many-valued bodies are parsed in a worker thread, one at a time (see GatewayApp._parse),
and a worker's large bodies share one byte budget (BodyBudget), so a burst of maximal bodies queues
instead of multiplying the worker's memory. docs/decisions.md ("Gateway request bodies under hostile
input") gives the reasons and the figures.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import re
import time
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


def structure(raw: bytes, max_values: int, *, slice_bytes: int = 0) -> tuple[int, int]:
    """(keys and values, keys) that the JSON text `raw` holds; exact for valid JSON, an upper bound otherwise.

    Counts only what lies outside strings: every value but the first of a container follows a comma,
    every key a colon. Stops early (returning a count over `max_values`) when the strings alone are
    too many, so that cutting them out never allocates more than `max_values` pieces.

    With `slice_bytes`, the text is counted in slices of about that size (never cut just after a
    backslash, so no escape is split), yielding the GIL between them: each C call holds it for one
    slice only, so the event loop's thread gets a turn while a worker thread counts a large body.
    """
    values, keys, strings, inside = 1, 0, 0, False
    start, end, size = 0, 0, len(raw)
    while end < size:
        end = size if not slice_bytes else min(start + slice_bytes, size)
        while end < size and raw[end - 1] == 0x5C:  # a backslash: the escape it starts is in the next byte
            end += 1
        text = raw if (start, end) == (0, size) else raw[start:end]
        if start:
            time.sleep(0)  # hand the GIL over between slices
        start = end
        # Escapes first: `\\` pairs, then `\"`, so that every quote left delimits a string.
        if text.find(b"\\") >= 0:  # one memchr pass; the pair searches below are slower
            if b"\\\\" in text:
                text = text.replace(b"\\\\", b"")
            if b'\\"' in text:
                text = text.replace(b'\\"', b"")
        quotes = text.count(b'"')
        strings += quotes
        if strings // 2 > max_values:
            return strings // 2, 0
        if quotes:
            parts = text.split(b'"')
            outside = b"".join(parts[1::2] if inside else parts[::2])
            inside ^= quotes % 2 == 1
        else:
            outside = b"" if inside else text
        # What is left of the text outside strings is the structure: one byte per container, comma and colon.
        marks = outside.translate(None, _NOT_STRUCTURE)
        values += len(marks)
        keys += marks.count(b":")
        if values > max_values:
            return values, 0
    return values, keys


def estimate(raw: bytes) -> int:
    """An upper bound on the keys and values of the JSON text `raw`, in four C-speed counts.

    Every value but the top one follows a `{`, `[`, `,` or `:` (strings may hold these bytes too,
    so this over-counts, never under-counts). Cheap enough for every request; decides where the
    body is parsed and whether the exact count (`structure`) is needed at all.
    """
    return 1 + raw.count(b"{") + raw.count(b"[") + raw.count(b",") + raw.count(b":")


# Integer literals of 20 digits or more, and negative ones of 19 (beyond 64 bits, or close: orjson reads those
# below -2**63 or above 2**64 - 1 as floats), and exponents of three digits (1e-400 becomes 0.0, 1e400 is
# refused): numbers a re-serialised body would change.
_WIDE_NUMBER = re.compile(rb"[0-9]{20}|-[0-9]{19}|[eE][-+]?0*[1-9][0-9]{2}")


# Digits to "0", "E" to "e", "+" to "-": a wide number leaves "0" * 20, "e000" or "e-000" in the mapped text.
_DIGITS = bytes.maketrans(b"123456789E+", b"000000000e-")


def wide_numbers(raw: bytes) -> bool:
    """Whether the JSON text `raw` holds a number outside strings that orjson cannot round-trip exactly."""
    mapped = raw.translate(_DIGITS)  # C speed; the regex below runs only on a suspicious body
    if b"0" * 20 not in mapped and b"-" + b"0" * 19 not in mapped and b"e000" not in mapped and b"e-000" not in mapped:
        return False
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return bool(_WIDE_NUMBER.search(b" ".join(text.split(b'"')[::2])))


def parse_body(raw: bytes, limits: BodyLimits, *, slice_bytes: int = 0) -> tuple[dict[str, Any], bool]:
    """Parse and check a chat body. Returns (payload, odd_numbers); raises BodyError.

    The exact pre-scan runs only when the body may hold too many values: never for a body of at most
    `max_values` bytes (it cannot hold more values than bytes), nor when the cheap bound says so.
    `odd_numbers` is true when the body may hold a number orjson does not read exactly (see wide_numbers).
    `slice_bytes` as for `structure` (a worker thread passes it; orjson's parse itself is one C call).
    """
    keys = -1  # not counted yet
    if len(raw) > limits.max_values and estimate(raw) > limits.max_values:
        values, keys = structure(raw, limits.max_values, slice_bytes=slice_bytes)
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
    parsed_keys, string_colons, odd_numbers = _walk(payload, len(raw), limits)
    if keys < 0:
        # Every key of the text has one colon outside strings. The colons outside strings are at most all
        # colons, less those the parsed strings hold, plus the `\u003a` escapes that made some of them:
        # when the parsed keys reach that bound, every key of the text is there and none repeated.
        escaped = raw.count(b"\\u003a") + raw.count(b"\\u003A") if b"\\u003" in raw else 0
        if parsed_keys != raw.count(b":") - string_colons + escaped:
            keys = structure(raw, len(raw) + 1, slice_bytes=slice_bytes)[1]  # exact, rarely needed
    if keys >= 0 and parsed_keys != keys:
        _fail_repeated(raw)
    check_chat(payload, limits)
    return payload, odd_numbers


# Floats orjson may have made of a number it could not read exactly: an integer beyond 64 bits (at least
# 2**63 in magnitude) or an exponent beyond a double's range (read as 0.0).
_ODD_FLOAT = float(2**63)


def _walk(payload: dict[str, Any], size: int, limits: BodyLimits) -> tuple[int, int, bool]:
    """Check depth and string lengths everywhere. Returns (keys the parsed object holds, colons in its
    strings and keys, whether a float may stand for a number the text spelt otherwise).

    A body of at most `max_string_chars` bytes cannot hold a longer string (every character takes at
    least one byte), so lengths are checked only in larger ones. Only non-empty containers are pushed;
    depth is checked as each container is met.
    """
    max_depth, max_chars = limits.max_depth, limits.max_string_chars
    check_strings = size > max_chars
    keys = colons = 0
    odd = False
    stack: list[tuple[Any, int]] = [(payload, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        value, depth = pop()
        if type(value) is dict:
            keys += len(value)
            for key in value:
                if ":" in key:
                    colons += key.count(":")
                if check_strings and len(key) > max_chars:
                    _fail_string(payload, limits)
            value = value.values()
        child = depth + 1
        for item in value:
            kind = type(item)
            if kind is str:
                if ":" in item:
                    colons += item.count(":")
                if check_strings and len(item) > max_chars:
                    _fail_string(payload, limits)
            elif kind is dict or kind is list:
                if child > max_depth:  # a container here, even an empty one, is too deep
                    _fail_depth(payload, limits)
                if item:
                    push((item, child))
            elif kind is float and (not item or item >= _ODD_FLOAT or item <= -_ODD_FLOAT):
                odd = True
    return keys, colons, odd


def _fail_repeated(raw: bytes) -> None:
    """Name the first object that repeats a key (however it is spelt): the text parsed again, with pairs."""
    found: list[tuple[str, dict[str, Any]]] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(items)
        if not found and len(value) < len(items):
            seen: set[str] = set()
            for key, _ in items:
                if key in seen:
                    found.append((key, value))
                    break
                seen.add(key)
        return value

    tree = json.loads(raw, object_pairs_hook=pairs)  # valid JSON: orjson read it
    key, holder = found[0] if found else ("", None)
    path = _find(tree, lambda value, depth: value is holder)
    param = f"{path}.{_clip(key)}" if path != "(body)" else _clip(key)
    raise BodyError(
        f"The request body repeats the key '{_clip(key)}' in one object (at '{param}'); send each key once.",
        code="duplicate_key",
        param=param,
    )


def check_chat(payload: dict[str, Any], limits: BodyLimits) -> None:
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


# Keys are echoed in an error's `param` and `message`: each is cut to this many characters there.
PATH_KEY_CHARS = 64


def _clip(key: str) -> str:
    return key if len(key) <= PATH_KEY_CHARS else key[:PATH_KEY_CHARS] + "..."


def _find(payload: Any, bad: Any) -> str:
    """Path (`messages[3].content`) of the first value `bad(value, depth)` flags; only on the error path.

    Object keys are checked as strings too: a key too long is reported at the object holding it.
    Each stack entry keeps its parent's entry and its own key or index, so a wide container costs
    one small tuple per member; the path is spelt only for the value found.
    """
    Node = tuple[Any, int, Any, Any]  # (value, depth, parent node, key or index)
    stack: list[Node] = [(payload, 1, None, None)]
    while stack:
        node = stack.pop()
        value, depth = node[0], node[1]
        if bad(value, depth):
            return _path(node)
        if isinstance(value, dict):
            for key, item in value.items():
                if bad(key, depth):
                    return _path(node)
                stack.append((item, depth + 1, node, key))
        elif isinstance(value, list):
            stack.extend((item, depth + 1, node, i) for i, item in enumerate(value))
    return "(body)"


def _path(node: Any) -> str:
    parts: list[str] = []
    while node is not None and node[2] is not None:
        key = node[3]
        parts.append(f"[{key}]" if isinstance(key, int) else f".{_clip(key)}")
        node = node[2]
    path = "".join(reversed(parts)).removeprefix(".")
    return path or "(body)"


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
                # A cancelled waiter may already have been dropped by _wake (which skips done futures).
                with contextlib.suppress(ValueError):
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
