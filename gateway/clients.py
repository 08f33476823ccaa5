"""Client protocols other than OpenAI's: the Anthropic Messages API (`POST /v1/messages`).

The pipeline (auth, guardrails, routing, breakers and fallback, the attempt loop, every adapter) works in
the gateway's canonical shape, OpenAI Chat Completions. An Anthropic client's request is translated into it
on the way in (gateway.translate), and `AnthropicClientSend` wraps the ASGI `send` on the way out: each
response the pipeline writes (an answer, a stream, an upstream's error, the gateway's own refusals) reaches
the client in the Anthropic shape. A stream is translated chunk by chunk as it is written, never buffered.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson

from gateway.translate import (
    OpenAIToAnthropicStream,
    TranslationError,
    anthropic_sse,
    dumps,
    openai_error_to_anthropic,
    openai_to_anthropic_response,
)
from gateway.translate.errors import anthropic_error_body
from gateway.upstream.anthropic import MAX_EVENT_BYTES

log = logging.getLogger(__name__)

ANTHROPIC_JSON = [(b"content-type", b"application/json")]
_REFRAMED = (b"content-length", b"content-type")


class AnthropicClientSend:
    """An ASGI `send` that turns the OpenAI-shaped responses written through it into Anthropic ones.

    Whether a response is a stream is the request's to say (`stream`, set once the request is read), never the
    upstream's content-type: a stream request's 200 is the gateway's own event stream, and everything else (an
    answer, any error, whatever its upstream labelled it) is one whole body, translated and sent with its own
    length. `prepare` translates a whole answer ahead of time (the attempt loop's check that the client can be
    given it, before the outcome is told to the breaker); the response then sends that translation."""

    __slots__ = ("_body", "_pending", "_ready", "_sse", "_start", "_stream", "model", "send", "stream")

    def __init__(self, send: Any, model: str) -> None:
        self.send = send
        self.model = model
        self.stream = False  # the request asked for a stream
        self._start: dict[str, Any] | None = None
        self._sse = False
        self._body: list[bytes] = []
        self._pending = b""
        self._ready: bytes | None = None  # the answer `prepare` translated
        self._stream: OpenAIToAnthropicStream | None = None

    def prepare(self, answer: dict[str, Any]) -> None:
        """Translate the whole (parsed) OpenAI answer about to be sent; raises what `_whole` would turn into a
        502 (TranslationError, TypeError, ValueError, KeyError, AttributeError)."""
        translated = openai_to_anthropic_response(answer, model=None)
        if not translated.get("model"):
            translated["model"] = self.model
        self._ready = dumps(translated)

    async def __call__(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self._sse = self.stream and message["status"] == 200
            if self._sse:
                self._stream = OpenAIToAnthropicStream(self.model)
                headers = message.get("headers") or []
                if any(k.lower() == b"content-length" for k, _ in headers):
                    # The translated events' length is not the OpenAI stream's: the server frames the body.
                    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
                    message = {**message, "headers": headers}
                await self.send(message)
            else:
                self._start = message  # sent with the translated body, whose length differs
            return
        if message["type"] != "http.response.body":
            await self.send(message)
            return
        more = bool(message.get("more_body", False))
        body = message.get("body", b"")
        if self._sse:
            await self.send(
                {"type": "http.response.body", "body": self._events(body, final=not more), "more_body": more}
            )
            return
        self._body.append(body)
        if more:
            return
        assert self._start is not None
        status, ready = self._start["status"], self._ready
        if status == 200 and ready is not None:
            out = ready
        else:
            status, out = _whole(status, b"".join(self._body), self.model)
        self._body.clear()
        # The translated body is JSON, whatever the upstream's was labelled, and has a length of its own.
        headers = [(k, v) for k, v in self._start.get("headers") or [] if k.lower() not in _REFRAMED]
        if status < 200 or status in (204, 304):
            out = b""  # a status that carries no body (an upstream's 204): none is sent
        else:
            headers += [*ANTHROPIC_JSON, (b"content-length", str(len(out)).encode())]
        await self.send({"type": "http.response.start", "status": status, "headers": headers})
        await self.send({"type": "http.response.body", "body": out})

    def _events(self, body: bytes, *, final: bool) -> bytes:
        """The Anthropic events for the complete OpenAI `data:` lines in `body` (the rest waits for more)."""
        assert self._stream is not None
        data = self._pending + body
        lines = data.split(b"\n")
        self._pending = b"" if final else lines.pop()
        if len(self._pending) > MAX_EVENT_BYTES:
            # An unfinished line past any event's size: dropped whole, or it would grow (and be copied) with
            # every chunk. Its rest, when it ends, is not a `data:` line and is skipped below.
            log.warning(
                "gateway: an upstream stream line over %d bytes was dropped for an Anthropic client", MAX_EVENT_BYTES
            )
            self._pending = b""
        out: list[bytes] = []
        for raw in lines:
            line = raw.rstrip(b"\r")
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                out.extend(anthropic_sse(event, event_data) for event, event_data in self._stream.finish())
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                continue  # the default path relays a malformed upstream line; an Anthropic client cannot use it
            if not isinstance(chunk, dict):
                continue
            # An upstream error chunk becomes Anthropic's `error` event, which ends the stream: nothing after it,
            # no `message_stop` (a `[DONE]` that follows it is not a clean end).
            try:
                events = self._stream.feed(chunk)
            except (TranslationError, TypeError, ValueError, AttributeError) as exc:  # a chunk it cannot translate
                self._stream.done = True
                out.append(anthropic_sse("error", anthropic_error_body("api_error", str(exc))))
                continue
            out.extend(anthropic_sse(event, event_data) for event, event_data in events)
        return b"".join(out)


def _whole(status: int, body: bytes, model: str) -> tuple[int, bytes]:
    """A whole OpenAI-shaped response (answer or error) in the Anthropic shape."""
    if status != 200:
        out_status, error = openai_error_to_anthropic(status, body)
        return out_status, orjson.dumps(error)
    try:
        answer = openai_to_anthropic_response(orjson.loads(body), model=None)
        if not answer.get("model"):
            answer["model"] = model
        return 200, dumps(answer)
    except (orjson.JSONDecodeError, TranslationError, TypeError, ValueError, KeyError, AttributeError) as exc:
        error = anthropic_error_body("api_error", f"The upstream's answer could not be translated: {exc}")
        return 502, orjson.dumps(error)


def anthropic_refusal(status: int, message: str) -> bytes:
    """The gateway's own error (before any upstream call) in the Anthropic shape."""
    _, error = openai_error_to_anthropic(status, {"error": {"message": message}})
    return orjson.dumps(error)
