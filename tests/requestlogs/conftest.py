"""A small catalog with keys for each role, request-log rows written through the real writer, and a Redis
stream of the test's own."""

import time
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from tests.conftest import _make_user
from tests.factories import AgentFactory, ApplicationFactory, LlmModelFactory, ProviderFactory, TeamFactory
from tests.factories.keys import make_key
from tests.factories.requestlogs import insert_logs, log_record


@dataclass
class Catalog:
    alice_key: Any  # the admin's key
    ursula_key: Any  # the plain user's keys: team red, application web
    ursula_key2: Any
    oscar_key: Any  # another user's key: team blue, application batch
    oscar: Any
    red: Any
    blue: Any
    web: Any
    batch: Any
    agent: Any


@pytest.fixture
def log_catalog(admin_user, plain_user, django_user_model) -> Catalog:
    openai = ProviderFactory(name="openai")
    backup = ProviderFactory(name="backup")
    LlmModelFactory(name="gpt-4o", provider=openai)
    LlmModelFactory(name="claude", provider=backup)
    LlmModelFactory(name="mistral", provider=backup)
    red, blue = TeamFactory(name="red"), TeamFactory(name="blue")
    web, batch = ApplicationFactory(name="web", team=red), ApplicationFactory(name="batch", team=blue)
    agent = AgentFactory(name="summariser", application=web)
    oscar = _make_user(django_user_model, "oscar", "user")
    return Catalog(
        alice_key=make_key(user=admin_user, name="alice ops").key,
        ursula_key=make_key(user=plain_user, name="ursula laptop", team=red, application=web, agent=agent).key,
        ursula_key2=make_key(user=plain_user, name="ursula ci", team=red).key,
        oscar_key=make_key(user=oscar, name="oscar batch", team=blue, application=batch).key,
        oscar=oscar,
        red=red,
        blue=blue,
        web=web,
        batch=batch,
        agent=agent,
    )


@pytest.fixture
def rows(log_catalog):
    """One request per key, newest first: ursula's two keys, then oscar's, then alice's."""
    now = time.time()
    return insert_logs(
        log_record(key=log_catalog.ursula_key, at=now - 1),
        log_record(key=log_catalog.ursula_key2, at=now - 2),
        log_record(key=log_catalog.oscar_key, at=now - 3),
        log_record(key=log_catalog.alice_key, at=now - 4),
    )


@pytest.fixture
def stream(redis_url):
    """A Redis stream name of this test's own; it and its side keys (`<name>...`) are deleted afterwards."""
    name = f"test:requestlogs:{uuid.uuid4().hex}"
    yield name
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(f"{name}*"))
    if keys:
        client.delete(*keys)
