"""Anthropic Messages upstreams: the gateway's canonical (OpenAI-shaped) request in, OpenAI shape back.

`POST {base_url}/v1/messages` with `x-api-key` and `anthropic-version`. The request is translated before
anything is sent (gateway.translate: a parameter Anthropic cannot express raises TranslationError, which the
attempt loop answers with a 400 naming it); the answer, its stream events and its errors come back as the
OpenAI protocol's, so the breaker, the resilience policy and the client see one shape. A stream is
translated event by event as it arrives, never buffered.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson

from gateway.snapshot import ProviderInfo
from gateway.translate import (
    AnthropicToOpenAIStream,
    TranslationError,
    anthropic_error_to_openai,
    anthropic_to_openai_response,
    dumps,
    openai_sse,
    openai_to_anthropic_request,
)
from gateway.upstream.base import UpstreamError, UpstreamResponse
from gateway.upstream.openai import HttpAdapter, header_safe
from gateway.upstream.transport import FastTransport, RawResponse, RequestBody

ANTHROPIC_VERSION = "2023-06-01"
_JSON = (b"content-type", b"application/json")
_SSE = (b"content-type", b"text/event-stream")
_KEEP = {b"retry-after", b"request-id", b"x-request-id"}
_DONE = b"data: [DONE]\n\n"
# An SSE event larger than this is not a real one: the stream is treated as broken.
MAX_EVENT_BYTES = 1024 * 1024


class AnthropicAdapter(HttpAdapter):
    protocol = "anthropic"

    def __init__(self, provider: ProviderInfo, transport: FastTransport) -> None:
        auth = f"x-api-key: {header_safe(provider.api_key)}\r\n" if provider.api_key else ""
        super().__init__(
            provider,
            transport,
            url=f"{provider.base_url}/v1/messages",
            extra_head=f"anthropic-version: {ANTHROPIC_VERSION}\r\n{auth}",
        )

    async def chat(
        self,
        body: bytes | RequestBody,
        *,
        stream: bool,
        connect_timeout: float | None = None,
        model: str | None = None,
        max_tokens_default: int | None = None,
    ) -> UpstreamResponse:
        data = body.data if isinstance(body, RequestBody) else body
        payload = orjson.loads(data)
        translated = openai_to_anthropic_request(payload, max_tokens_default=max_tokens_default or 4096)
        include_usage = bool((payload.get("stream_options") or {}).get("include_usage"))
        served = model or str(payload.get("model") or "")
        del payload
        if isinstance(body, RequestBody):
            body.sent()  # the translated copy goes upstream; the client's bytes are no longer needed here
        raw = await self.send(dumps(translated), connect_timeout=connect_timeout)
        kept = [(k, v) for k, v in raw.headers if k.lower() in _KEEP]
        if stream and raw.status == 200:
            return UpstreamResponse(200, [_SSE, *kept], stream=_translated(raw, served, include_usage))
        content = await self.read(raw)
        if raw.status != 200:
            status, error = anthropic_error_to_openai(raw.status, content)
            return UpstreamResponse(status, [_JSON, *kept], orjson.dumps(error))
        try:
            parsed = orjson.loads(content)
            if not isinstance(parsed, dict):  # `null`, a list, a string, a number: JSON, but no Messages response
                raise TypeError(f"a JSON {type(parsed).__name__}, not an object")
            answer = anthropic_to_openai_response(parsed, model=served)
            rewritten = orjson.dumps(answer)  # orjson writes at most 254 levels deep; it reads 1,024
        except (orjson.JSONDecodeError, TranslationError, TypeError, ValueError, KeyError, AttributeError) as exc:
            raise UpstreamError("bad_response", f"{self.provider.name} sent an answer this gateway cannot read: {exc}")
        return UpstreamResponse(200, [_JSON, *kept], rewritten)


async def _translated(raw: RawResponse, model: str, include_usage: bool) -> AsyncIterator[bytes]:
    """The Anthropic event stream as OpenAI `data:` chunks, each sent as soon as its event is complete.
    A `data:` line that is not JSON passes through as it is (the attempt loop drops and counts it); an
    `error` event becomes an OpenAI error event; `message_stop` ends the stream with `[DONE]`. An event the
    converter cannot take (a field of an impossible type) is the upstream's `bad_response`. A stream that ends
    after its `message_delta` (the stop reason and the usage) but without `message_stop` still delivers what
    `message_stop` would have: the usage chunk, with `include_usage` (never `[DONE]`, which the attempt loop adds
    to an answer that finished)."""
    converter = AnthropicToOpenAIStream(model, include_usage=include_usage)
    pending = b""
    try:
        async for chunk in raw.body:
            pending += chunk
            if b"\n\n" not in pending and b"\r\n\r\n" not in pending:
                if len(pending) > MAX_EVENT_BYTES:
                    raise UpstreamError("connection_error", "The upstream sent an event larger than 1 MiB.")
                continue
            pending = pending.replace(b"\r\n", b"\n")
            *events, pending = pending.split(b"\n\n")
            try:
                out = b"".join(_event_bytes(converter, event) for event in events)
            except (TranslationError, TypeError, ValueError, KeyError, AttributeError) as exc:
                raise UpstreamError("bad_response", f"The upstream sent an event this gateway cannot read: {exc}")
            if out:
                yield out
            if converter.done:
                return
    except httpx.TimeoutException:
        if converter.finish_reason is None:
            raise UpstreamError("timeout", "The upstream stopped sending (read timeout).")
    except httpx.TransportError as exc:
        if converter.finish_reason is None:
            raise UpstreamError("connection_error", f"The upstream dropped the stream: {exc}")
    finally:
        await raw.body.aclose()
    # The body ended (or was cut, or held open) after the stop reason but without `message_stop`: the answer is
    # whole (docs/resilience.md), and its usage is owed.
    if converter.finish_reason is not None:
        out = b"".join(openai_sse(chunk) for chunk in converter.feed("message_stop", {}))
        if out:
            yield out


def _event_bytes(converter: AnthropicToOpenAIStream, event: bytes) -> bytes:
    name, data = "", b""
    for line in event.split(b"\n"):
        if line.startswith(b"event:"):
            name = line[6:].strip().decode("utf-8", "replace")
        elif line.startswith(b"data:"):
            data += line[5:].strip()
    if not data:
        return b""
    try:
        parsed = orjson.loads(data)
    except orjson.JSONDecodeError:
        return b"data: " + data + b"\n\n"
    if not isinstance(parsed, dict):
        return b"data: " + data + b"\n\n"
    out = b"".join(openai_sse(chunk) for chunk in converter.feed(name, parsed))
    if converter.done and name == "message_stop":
        out += _DONE
    return out
