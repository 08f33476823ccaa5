"""Refusals of untranslatable requests, and error bodies carried from one protocol's shape to the other's.

A fallback from an OpenAI-shaped request to an Anthropic upstream (or the reverse) must never change
what the caller asked for without saying so. What cannot be said in the other protocol is refused
with a `TranslationError` that names the parameter; the gateway turns it into a 400 in the caller's
own shape. Upstream errors keep their message and their meaning (rate limit, overload, bad key), so a
client's retry logic behaves as it would against the provider it thinks it is talking to.
"""

from __future__ import annotations

from typing import Any

import orjson

Json = dict[str, Any]

# The longest non-JSON upstream body quoted in a translated error, so a proxy's HTML page stays short.
MAX_QUOTED_BODY = 500


class TranslationError(ValueError):
    """A request (or response) that cannot be expressed in the other protocol without changing its meaning.

    `param` is the path of the offending field in the caller's request (`"n"`,
    `"messages[2].tool_calls[0].function.arguments"`), so the 400 can say exactly what to change.
    """

    def __init__(self, param: str, message: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param
        self.message = message

    def openai_body(self) -> Json:
        """The 400 body for an OpenAI-shaped client."""
        return {"error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": None}}

    def anthropic_body(self) -> Json:
        """The 400 body for an Anthropic-shaped client (Anthropic errors have no `param`, so it leads the message)."""
        return anthropic_error_body("invalid_request_error", f"{self.param}: {self.message}")


# Anthropic error type -> (the status Anthropic sends it with, OpenAI error type). The Anthropic type
# also becomes the OpenAI `code`, so a client can still tell a billing problem from a plain bad request.
_ANTHROPIC_TO_OPENAI: dict[str, tuple[int, str]] = {
    "invalid_request_error": (400, "invalid_request_error"),
    "authentication_error": (401, "authentication_error"),
    "billing_error": (402, "insufficient_quota"),
    "permission_error": (403, "permission_error"),
    "not_found_error": (404, "invalid_request_error"),
    "request_too_large": (413, "invalid_request_error"),
    "rate_limit_error": (429, "rate_limit_error"),
    "api_error": (500, "server_error"),
    "timeout_error": (504, "server_error"),
    "overloaded_error": (529, "server_error"),
}

# OpenAI status -> (Anthropic status, Anthropic error type). 503 becomes Anthropic's 529 "overloaded".
_OPENAI_STATUS_TO_ANTHROPIC: dict[int, tuple[int, str]] = {
    400: (400, "invalid_request_error"),
    401: (401, "authentication_error"),
    402: (402, "billing_error"),
    403: (403, "permission_error"),
    404: (404, "not_found_error"),
    413: (413, "request_too_large"),
    429: (429, "rate_limit_error"),
    500: (500, "api_error"),
    503: (529, "overloaded_error"),
    504: (504, "timeout_error"),
}


def as_object(value: Any) -> Json:
    """`value` if it is a JSON object, else an empty one: the fields of a malformed body read as absent."""
    return value if isinstance(value, dict) else {}


def as_count(value: Any, default: int = 0) -> int:
    """`value` if it is a whole number (a float with no fraction too), else `default`: a malformed count or index
    from an upstream reads as absent instead of failing the translation."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return default


def anthropic_error_body(kind: str, message: str) -> Json:
    """An error in the Anthropic shape: `{"type": "error", "error": {"type", "message"}}`."""
    return {"type": "error", "error": {"type": kind, "message": message}}


def openai_error_body(message: str, *, kind: str, code: str | None = None) -> Json:
    """An error in the OpenAI shape, the same four keys the gateway's own errors carry."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def anthropic_error_to_openai(status: int, body: bytes | Json) -> tuple[int, Json]:
    """An Anthropic upstream's error response, as the OpenAI-shaped client should see it."""
    parsed = _parse(body)
    error = parsed.get("error") if parsed is not None else None
    kind = error.get("type") if isinstance(error, dict) else None
    if not isinstance(kind, str) or kind not in _ANTHROPIC_TO_OPENAI:
        kind = _anthropic_kind_for_status(status)
    openai_kind = _ANTHROPIC_TO_OPENAI[kind][1]
    # Only Anthropic's own 529 needs a new number; any other status already means what it says over HTTP.
    out_status = 503 if status == 529 else status
    return out_status, openai_error_body(_message(parsed, body, status), kind=openai_kind, code=kind)


def openai_error_to_anthropic(status: int, body: bytes | Json) -> tuple[int, Json]:
    """An OpenAI-shaped upstream's error response, as the Anthropic-shaped client should see it."""
    parsed = _parse(body)
    out_status, kind = _OPENAI_STATUS_TO_ANTHROPIC.get(status, (status, _anthropic_kind_for_status(status)))
    return out_status, anthropic_error_body(kind, _message(parsed, body, status))


def openai_stream_error(error: Json) -> Json:
    """An OpenAI stream's `{"error": {...}}` chunk, as the data of an Anthropic `error` event."""
    message = error.get("message") if isinstance(error.get("message"), str) else "Upstream stream error."
    code = error.get("code")
    kind = "overloaded_error" if code in ("overloaded", "overloaded_error") else "api_error"
    return anthropic_error_body(kind, str(message))


def anthropic_stream_error(data: Json) -> Json:
    """An Anthropic `error` event's data, as the OpenAI `{"error": {...}}` the caller sends as the last event."""
    error = as_object(data.get("error"))
    kind = error["type"] if isinstance(error.get("type"), str) else "api_error"
    message = error["message"] if isinstance(error.get("message"), str) else "Upstream stream error."
    openai_kind = _ANTHROPIC_TO_OPENAI.get(kind, (500, "server_error"))[1]
    return openai_error_body(message, kind=openai_kind, code=kind)


def _anthropic_kind_for_status(status: int) -> str:
    """The Anthropic error type for a status, when the body does not say: 4xx are requests, 5xx are the API."""
    for kind, (kind_status, _) in _ANTHROPIC_TO_OPENAI.items():
        if kind_status == status:
            return kind
    return "invalid_request_error" if 400 <= status < 500 else "api_error"


def _parse(body: bytes | Json) -> Json | None:
    if isinstance(body, dict):
        return body
    try:
        parsed = orjson.loads(body)  # bounded depth (a deeply nested body is not JSON to it), unlike json's
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _message(parsed: Json | None, raw: bytes | Json, status: int) -> str:
    """The upstream's own words: `error.message`, a bare `error` string, `message`, `detail`, or the raw text."""
    if parsed is not None:
        error = parsed.get("error")
        candidates = [error.get("message") if isinstance(error, dict) else error, parsed.get("message")]
        candidates.append(parsed.get("detail"))
        for candidate in candidates:
            if isinstance(candidate, str) and candidate:
                return candidate
    if isinstance(raw, bytes) and parsed is None:
        text = raw.decode("utf-8", errors="replace").strip()
        if text:
            return text[:MAX_QUOTED_BODY]
    return f"Upstream error (HTTP {status})."
