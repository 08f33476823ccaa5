"""Routing fixtures."""

import pytest

from tests.factories import LlmModelFactory


@pytest.fixture
def models(db):
    """Three models by name, each on a provider of its own: gpt-4o, gpt-4o-mini, claude-sonnet."""
    return {name: LlmModelFactory(name=name) for name in ("gpt-4o", "gpt-4o-mini", "claude-sonnet")}
