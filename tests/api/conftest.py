"""API fixtures: a small catalog."""

import pytest

from tests.factories import LlmModelFactory, ProviderFactory


@pytest.fixture
def catalog(db):
    """Two providers and four models: gpt-4o and gpt-4o-mini (openai), claude-sonnet (anthropic), gemini-pro."""
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic", protocol="anthropic")
    return {
        "openai": openai,
        "anthropic": anthropic,
        "gpt-4o": LlmModelFactory(name="gpt-4o", provider=openai),
        "gpt-4o-mini": LlmModelFactory(name="gpt-4o-mini", provider=openai),
        "claude-sonnet": LlmModelFactory(name="claude-sonnet", provider=anthropic),
        "gemini-pro": LlmModelFactory(name="gemini-pro"),
    }
