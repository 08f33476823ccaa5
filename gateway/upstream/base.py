"""The adapter contract and the one error type adapters raise."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass

from gateway.snapshot import ProviderInfo
from gateway.upstream.transport import FastTransport, RequestBody


class UpstreamError(Exception):
    """A call that produced no usable response. `kind` is "timeout", "connection_error",
    "credential_unavailable" (the provider's stored API key cannot be decrypted; nothing was sent) or
    "pool_full" (every connection the gateway allows to that upstream is busy; nothing was sent)."""

    def __init__(self, kind: str, message: str, *, connect_timeout: bool = False) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        # A "timeout" while connecting (the resilience policy logs it as `connect_timeout`).
        self.connect_timeout = connect_timeout


@dataclass(slots=True)
class UpstreamResponse:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes = b""
    # Set for streaming responses with status 200: the raw byte chunks as they arrive.
    stream: AsyncIterator[bytes] | None = None


class Adapter(ABC):
    """Calls one provider through that provider's connection pool."""

    protocol = ""

    def __init__(self, provider: ProviderInfo, transport: FastTransport) -> None:
        self.provider = provider
        self.transport = transport

    @abstractmethod
    async def chat(
        self,
        body: bytes | RequestBody,
        *,
        stream: bool,
        connect_timeout: float | None = None,
        model: str | None = None,
        max_tokens_default: int | None = None,
    ) -> UpstreamResponse:
        """Send a chat request in the gateway's canonical shape (OpenAI Chat Completions); answer in that shape.

        Raises UpstreamError for a call that produced no usable response, and gateway.translate's
        TranslationError (before anything is sent) for a request this protocol cannot express. `body` may be
        a RequestBody (same length): the transport drops it once written. `connect_timeout` replaces the
        provider's for this call (the resilience policy's, when shorter). `model` is the target's catalog
        model (the body names it too); `max_tokens_default` is its catalog default, for protocols that
        require `max_tokens`.
        """
