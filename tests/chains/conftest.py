"""Chains fixtures: the catalog the chain editor picks from."""

import pytest

from tests.factories import LlmModelFactory, ProviderFactory


@pytest.fixture
def chain_catalog(db):
    """A source model with vision, two cheaper text models, an expensive one, and a spare provider."""
    openai = ProviderFactory(name="openai")
    anthropic = ProviderFactory(name="anthropic")
    ProviderFactory(name="bedrock")
    return {
        "source": LlmModelFactory(
            name="gpt-4o",
            provider=openai,
            capabilities=["text", "vision"],
            input_price_per_mtok=5,
            output_price_per_mtok=15,
        ),
        "mini": LlmModelFactory(
            name="gpt-4o-mini",
            provider=openai,
            capabilities=["text", "vision"],
            input_price_per_mtok=1,
            output_price_per_mtok=3,
        ),
        "haiku": LlmModelFactory(
            name="claude-haiku",
            provider=anthropic,
            capabilities=["text"],
            input_price_per_mtok=1,
            output_price_per_mtok=1,
        ),
        "opus": LlmModelFactory(
            name="claude-opus",
            provider=anthropic,
            capabilities=["text", "vision"],
            input_price_per_mtok=15,
            output_price_per_mtok=45,
        ),
    }
