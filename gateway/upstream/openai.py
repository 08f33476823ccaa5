"""OpenAI-protocol upstreams (OpenAI, Azure OpenAI, Mistral, the simulator, ...)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from gateway.upstream.base import Adapter, UpstreamError, UpstreamResponse

_PASS_HEADERS = {b"content-type", b"x-request-id", b"openai-processing-ms"}


class OpenAIAdapter(Adapter):
    protocol = "openai"

    async def chat(self, body: bytes, *, stream: bool) -> UpstreamResponse:
        headers = {"content-type": "application/json"}
        if self.provider.api_key:
            headers["authorization"] = f"Bearer {self.provider.api_key}"
        request = self.client.build_request(
            "POST", f"{self.provider.base_url}/chat/completions", content=body, headers=headers
        )
        try:
            response = await self.client.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise UpstreamError("timeout", f"{self.provider.name} did not answer in time ({type(exc).__name__})")
        except httpx.TransportError as exc:
            raise UpstreamError("connection_error", f"Could not reach {self.provider.name}: {type(exc).__name__}")
        kept = [(k, v) for k, v in response.headers.raw if k.lower() in _PASS_HEADERS]
        if stream and response.status_code == 200:
            return UpstreamResponse(200, kept, stream=_chunks(response))
        try:
            content = await response.aread()
        except httpx.TimeoutException:
            raise UpstreamError("timeout", f"{self.provider.name} stopped sending its answer (read timeout)")
        except httpx.TransportError as exc:
            name = self.provider.name
            raise UpstreamError("connection_error", f"{name} dropped the connection: {type(exc).__name__}")
        finally:
            await response.aclose()
        return UpstreamResponse(response.status_code, kept, content)


async def _chunks(response: httpx.Response) -> AsyncIterator[bytes]:
    """Raw bytes as they arrive; transport failures become UpstreamError; always closes."""
    try:
        async for chunk in response.aiter_raw():
            yield chunk
    except httpx.TimeoutException:
        raise UpstreamError("timeout", "The upstream stopped sending (read timeout)")
    except httpx.TransportError as exc:
        raise UpstreamError("connection_error", f"The upstream dropped the stream: {type(exc).__name__}")
    finally:
        await response.aclose()
