"""OpenAI-protocol upstreams (OpenAI, Mistral, vLLM, Ollama, Groq, Together, the simulator, ...) and Azure OpenAI.

`HttpAdapter` is what every protocol shares: one request head built once per provider, the body written
after it without a copy, transport failures turned into UpstreamError. The OpenAI adapter passes the
canonical request and the answer through unchanged; the Azure one only changes where it goes (a deployment
URL with `api-version`) and how it authenticates (`api-key`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from urllib.parse import quote

import httpx

from core.crypto import ROTATION_FIX, credential_unavailable_message
from gateway.snapshot import ProviderInfo
from gateway.upstream.base import Adapter, UpstreamError, UpstreamResponse
from gateway.upstream.transport import FastTransport, Origin, RawResponse, RequestBody, origin_of

log = logging.getLogger(__name__)

# Retry-After reaches the client (its SDK honours it) and the resilience policy (gateway.resilience.retry_after).
_PASS_HEADERS = {b"content-type", b"x-request-id", b"openai-processing-ms", b"retry-after", b"retry-after-ms"}


def header_safe(value: str) -> str:
    # A stray CR/LF in configuration must never split the request head.
    return value.replace("\r", "").replace("\n", "")


def request_head(url: httpx.URL, extra: str) -> bytes:
    return (
        f"POST {url.raw_path.decode()} HTTP/1.1\r\nHost: {url.netloc.decode()}\r\n"
        "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
        f"User-Agent: controlplane-gateway\r\n{extra}"
    ).encode()


class HttpAdapter(Adapter):
    """One provider over the gateway's transport: `send` a body after a prepared head, `read` an answer."""

    def __init__(self, provider: ProviderInfo, transport: FastTransport, *, url: str, extra_head: str) -> None:
        super().__init__(provider, transport)
        parsed = httpx.URL(url)
        self._origin: Origin = origin_of(parsed)
        # A stored key the configured keys cannot decrypt reads as "": sending the call without
        # credentials would fail upstream in a misleading way (or reach an open endpoint), so refuse.
        # Decided once, when the snapshot is built (ProviderInfo.credential_unavailable).
        self._undecryptable = provider.credential_unavailable
        self._head = request_head(parsed, "" if self._undecryptable else extra_head)

    async def send(
        self, body: bytes | RequestBody, *, connect_timeout: float | None, head: bytes | None = None
    ) -> RawResponse:
        name = self.provider.name
        if self._undecryptable:
            log.error("Provider %s: its stored API key cannot be decrypted; not calling it. %s", name, ROTATION_FIX)
            raise UpstreamError("credential_unavailable", credential_unavailable_message(name))
        # The head and the body are written one after the other: the body (up to the gateway's body
        # limit) is never copied into one buffer with the head.
        head = (head or self._head) + b"Content-Length: %d\r\n\r\n" % len(body)
        try:
            return await self.transport.send_raw(
                self._origin,
                head,
                body=body,
                connect_timeout=self.provider.connect_timeout if connect_timeout is None else connect_timeout,
                read_timeout=self.provider.read_timeout,
            )
        except httpx.PoolTimeout:
            # The gateway's own per-origin connection cap, not the provider: a kind of its own, which the
            # breaker does not count as the provider's failure.
            cap = self.transport.max_connections_per_origin
            raise UpstreamError("pool_full", f"All {cap} connections to {name} are in use; retry shortly.")
        except httpx.ConnectTimeout:
            raise UpstreamError("timeout", f"Could not connect to {name} in time.", connect_timeout=True)
        except httpx.TimeoutException as exc:
            raise UpstreamError("timeout", f"{name} did not answer in time ({type(exc).__name__}).")
        except httpx.TransportError as exc:
            raise UpstreamError("connection_error", f"Could not reach {name}: {exc}")

    async def read(self, raw: RawResponse) -> bytes:
        name = self.provider.name
        try:
            return await raw.body.aread()
        except httpx.TimeoutException:
            raise UpstreamError("timeout", f"{name} stopped sending its answer (read timeout).")
        except httpx.TransportError as exc:
            raise UpstreamError("connection_error", f"{name} dropped the connection: {exc}")
        finally:
            await raw.body.aclose()

    async def passthrough(self, raw: RawResponse, *, stream: bool) -> UpstreamResponse:
        """An OpenAI-shaped answer as it came: the stream's bytes, or the whole body."""
        kept = [(k, v) for k, v in raw.headers if k.lower() in _PASS_HEADERS]
        if stream and raw.status == 200:
            return UpstreamResponse(200, kept, stream=_chunks(raw))
        return UpstreamResponse(raw.status, kept, await self.read(raw))


class OpenAIAdapter(HttpAdapter):
    protocol = "openai"

    def __init__(self, provider: ProviderInfo, transport: FastTransport) -> None:
        auth = f"Authorization: Bearer {header_safe(provider.api_key)}\r\n" if provider.api_key else ""
        super().__init__(provider, transport, url=f"{provider.base_url}/chat/completions", extra_head=auth)

    async def chat(
        self,
        body: bytes | RequestBody,
        *,
        stream: bool,
        connect_timeout: float | None = None,
        model: str | None = None,
        max_tokens_default: int | None = None,
    ) -> UpstreamResponse:
        raw = await self.send(body, connect_timeout=connect_timeout)
        return await self.passthrough(raw, stream=stream)


class AzureAdapter(HttpAdapter):
    """Azure OpenAI: `{base_url}/openai/deployments/{deployment}/chat/completions?api-version=...` with an
    `api-key` header. The deployment is the provider's mapping of the catalog model (default: its name)."""

    protocol = "azure"

    def __init__(self, provider: ProviderInfo, transport: FastTransport) -> None:
        self._auth = f"api-key: {header_safe(provider.api_key)}\r\n" if provider.api_key else ""
        super().__init__(provider, transport, url=_azure_url(provider, ""), extra_head=self._auth)
        self._heads: dict[str, bytes] = {}

    def _head_for(self, model: str) -> bytes:
        head = self._heads.get(model)
        if head is None:
            extra = "" if self._undecryptable else self._auth
            url = _azure_url(self.provider, self.provider.deployment(model))
            head = self._heads[model] = request_head(httpx.URL(url), extra)
        return head

    async def chat(
        self,
        body: bytes | RequestBody,
        *,
        stream: bool,
        connect_timeout: float | None = None,
        model: str | None = None,
        max_tokens_default: int | None = None,
    ) -> UpstreamResponse:
        raw = await self.send(body, connect_timeout=connect_timeout, head=self._head_for(model or ""))
        return await self.passthrough(raw, stream=stream)


def _azure_url(provider: ProviderInfo, deployment: str) -> str:
    query = f"?{httpx.QueryParams({'api-version': provider.api_version})}" if provider.api_version else ""
    return f"{provider.base_url}/openai/deployments/{quote(deployment or 'none', safe='')}/chat/completions{query}"


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
