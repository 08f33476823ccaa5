"""Shared fixtures: the role cast (admin, bi_read_only, user, anonymous), the Redis URL, and the catalogs
more than one folder builds."""

import os

import pytest
from django.contrib.auth.models import Group
from django.core.cache import cache
from django.test import Client

from tests.factories import LlmModelFactory, ProviderFactory
from tests.faults import FaultProxy

# Playwright's sync API runs an event loop in the test thread; the ORM calls in
# browser tests would otherwise raise SynchronousOnlyOperation. Tests only.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

TEST_REDIS_URL = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
PASSWORD = "correct-horse-battery"


# What a db_independent test may not ask for, itself or through its fixtures (an item's fixturenames is the
# whole closure): the database, a server on it, or Django's settings.
_PASS_DEPENDENT_FIXTURES = frozenset(
    {"db", "transactional_db", "django_db_reset_sequences", "django_db_serialized_rollback", "live_server", "settings"}
)


def pytest_collection_modifyitems(config, items):
    """make test runs db_independent tests in one pass only (the SQLite one): refuse the mark on a test that asks
    for the database or Django's settings (what the passes change), so the mark cannot hide such a test from
    the other. Code that reads django.conf.settings on its own is not seen: the mark is the module author's
    claim."""
    for item in items:
        if item.get_closest_marker("db_independent") is None:
            continue
        used = _PASS_DEPENDENT_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if used or item.get_closest_marker("django_db"):
            raise pytest.UsageError(
                f"{item.nodeid} is marked db_independent but uses {', '.join(sorted(used)) or 'django_db'}"
            )


@pytest.fixture(autouse=True)
def _empty_cache():
    """Every test starts with an empty Django cache. The test settings' cache lives in the process, so
    without this a test reads what an earlier one cached: the alerts banner (kept 5 s) would show another
    test's alerts, and could expire in the middle of a test that counts queries."""
    cache.clear()


def _make_user(django_user_model, username: str, role: str | None, **extra):
    user = django_user_model.objects.create_user(username=username, password=PASSWORD, **extra)
    if role:
        # get_or_create: transactional tests flush the groups the migration created.
        user.groups.add(Group.objects.get_or_create(name=role)[0])
    return user


@pytest.fixture
def admin_user(db, django_user_model):
    return _make_user(django_user_model, "alice", "admin", is_staff=True, is_superuser=True)


@pytest.fixture
def bi_user(db, django_user_model):
    return _make_user(django_user_model, "bianca", "bi_read_only")


@pytest.fixture
def plain_user(db, django_user_model):
    return _make_user(django_user_model, "ursula", "user")


def _client_for(user) -> Client:
    client = Client(enforce_csrf_checks=False)
    client.force_login(user)
    return client


@pytest.fixture
def admin_client(admin_user):
    return _client_for(admin_user)


@pytest.fixture
def bi_client(bi_user):
    return _client_for(bi_user)


@pytest.fixture
def user_client(plain_user):
    return _client_for(plain_user)


@pytest.fixture
def anon_client(db):
    return Client()


@pytest.fixture(params=["admin", "bi_read_only", "user", "anonymous"])
def role_client(request, db, django_user_model):
    """Each role in turn: yields (role name, client)."""
    role = request.param
    if role == "anonymous":
        return role, Client()
    user = _make_user(django_user_model, f"{role}-member", role)
    return role, _client_for(user)


@pytest.fixture
def redis_url() -> str:
    """The real Redis. Unreachable Redis fails the test (never skips)."""
    import redis

    client = redis.Redis.from_url(TEST_REDIS_URL)
    client.ping()
    return TEST_REDIS_URL


@pytest.fixture
def redis_proxy(redis_url):
    """A fault proxy in front of the real Redis, restored before teardown so open connections can finish."""
    with FaultProxy.for_redis(redis_url) as proxy:
        yield proxy
        proxy.restore()


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


@pytest.fixture
def health_catalog(db):
    """The Provider Health page's two circuits: gpt-4o on openai and claude-haiku on anthropic."""
    LlmModelFactory(name="gpt-4o", provider=ProviderFactory(name="openai"))
    LlmModelFactory(name="claude-haiku", provider=ProviderFactory(name="anthropic"))
