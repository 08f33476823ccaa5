"""Translation between the OpenAI Chat Completions and Anthropic Messages protocols (pure, no I/O).

See docs/protocols.md for what maps to what, what is dropped as harmless and what is refused.
"""

from gateway.translate.anthropic import (
    anthropic_to_openai_request,
    anthropic_to_openai_response,
    dumps,
    openai_to_anthropic_request,
    openai_to_anthropic_response,
)
from gateway.translate.errors import (
    TranslationError,
    anthropic_error_body,
    anthropic_error_to_openai,
    openai_error_to_anthropic,
)
from gateway.translate.stream import (
    OPENAI_SSE_DONE,
    AnthropicToOpenAIStream,
    OpenAIToAnthropicStream,
    anthropic_sse,
    openai_sse,
)

__all__ = [
    "OPENAI_SSE_DONE",
    "AnthropicToOpenAIStream",
    "OpenAIToAnthropicStream",
    "TranslationError",
    "anthropic_error_body",
    "anthropic_error_to_openai",
    "anthropic_sse",
    "anthropic_to_openai_request",
    "anthropic_to_openai_response",
    "dumps",
    "openai_error_to_anthropic",
    "openai_sse",
    "openai_to_anthropic_request",
    "openai_to_anthropic_response",
]
