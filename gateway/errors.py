"""Errors the gateway produces, in the client's protocol shape (OpenAI for /v1/chat/completions)."""

import orjson


def openai_error(
    message: str, *, kind: str = "invalid_request_error", code: str | None = None, param: str | None = None
) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def sse_error(message: str, *, kind: str = "upstream_error", code: str | None = None) -> bytes:
    """The last event of a stream cut mid-way: an error, never [DONE]."""
    return b"data: " + openai_error(message, kind=kind, code=code) + b"\n\n"
