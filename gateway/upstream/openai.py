"""OpenAI-protocol upstreams (OpenAI, Azure OpenAI, Mistral, the simulator, ...)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx

from core.crypto import ROTATION_FIX, credential_unavailable_message
from gateway.snapshot import ProviderInfo
from gateway.upstream.base import Adapter, UpstreamError, UpstreamResponse
from gateway.upstream.transport import FastTransport, RawResponse, RequestBody, origin_of

log = logging.getLogger(__name__)

# Retry-After reaches the client (its SDK honours it) and the resilience policy (gateway.resilience.retry_after).
_PASS_HEADERS = {b"content-type", b"x-request-id", b"openai-processing-ms", b"retry-after", b"retry-after-ms"}


def _header_safe(value: str) -> str:
    # A stray CR/LF in configuration must never split the request head.
    return value.replace("\r", "").replace("\n", "")


class OpenAIAdapter(Adapter):
    protocol = "openai"

    def __init__(self, provider: ProviderInfo, transport: FastTransport) -> None:
        super().__init__(provider, transport)
        url = httpx.URL(f"{provider.base_url}/chat/completions")
        self._origin = origin_of(url)
        head = (
            f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
            "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
            "User-Agent: controlplane-gateway\r\n"
        )
        # A stored key the configured keys cannot decrypt reads as "": sending the call without
        # credentials would fail upstream in a misleading way (or reach an open endpoint), so refuse.
        # Decided once, when the snapshot is built (ProviderInfo.credential_unavailable).
        self._undecryptable = provider.credential_unavailable
        if provider.api_key and not self._undecryptable:
            head += f"Authorization: Bearer {_header_safe(provider.api_key)}\r\n"
        self._head = head.encode()

    async def chat(
        self, body: bytes | RequestBody, *, stream: bool, connect_timeout: float | None = None
    ) -> UpstreamResponse:
        name = self.provider.name
        if self._undecryptable:
            log.error("Provider %s: its stored API key cannot be decrypted; not calling it. %s", name, ROTATION_FIX)
            raise UpstreamError("credential_unavailable", credential_unavailable_message(name))
        # The head and the body are written one after the other: the body (up to the gateway's body
        # limit) is never copied into one buffer with the head.
        head = self._head + b"Content-Length: %d\r\n\r\n" % len(body)
        try:
            raw = await self.transport.send_raw(
                self._origin,
                head,
                body=body,
                connect_timeout=self.provider.connect_timeout if connect_timeout is None else connect_timeout,
                read_timeout=self.provider.read_timeout,
            )
        except httpx.ConnectTimeout:
            raise UpstreamError("timeout", f"Could not connect to {name} in time.", connect_timeout=True)
        except httpx.TimeoutException as exc:
            raise UpstreamError("timeout", f"{name} did not answer in time ({type(exc).__name__}).")
        except httpx.TransportError as exc:
            raise UpstreamError("connection_error", f"Could not reach {name}: {exc}")
        kept = [(k, v) for k, v in raw.headers if k.lower() in _PASS_HEADERS]
        if stream and raw.status == 200:
            return UpstreamResponse(200, kept, stream=_chunks(raw))
        try:
            content = await raw.body.aread()
        except httpx.TimeoutException:
            raise UpstreamError("timeout", f"{name} stopped sending its answer (read timeout).")
        except httpx.TransportError as exc:
            raise UpstreamError("connection_error", f"{name} dropped the connection: {exc}")
        finally:
            await raw.body.aclose()
        return UpstreamResponse(raw.status, kept, content)


async def _chunks(raw: RawResponse) -> AsyncIterator[bytes]:
    """Raw bytes as they arrive; transport failures become UpstreamError; always releases the connection."""
    try:
        async for chunk in raw.body:
            yield chunk
    except httpx.TimeoutException:
        raise UpstreamError("timeout", "The upstream stopped sending (read timeout).")
    except httpx.TransportError as exc:
        raise UpstreamError("connection_error", f"The upstream dropped the stream: {exc}")
    finally:
        await raw.body.aclose()
