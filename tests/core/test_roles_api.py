"""Role matrix for every API endpoint: admin only, except the audit log (admin and bi_read_only)."""

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.test import Client

from audit.models import AuditEvent
from catalog.models import Agent, ApiKey, Application, LlmModel, Provider, Team
from catalog.services import console_token_create
from chains.models import FallbackChain
from routing.models import Alias, RoutingRule
from tests.conftest import PASSWORD
from tests.factories import (
    AgentFactory,
    AliasFactory,
    ApplicationFactory,
    ChainFactory,
    LlmModelFactory,
    ProviderFactory,
    RoutingRuleFactory,
    TeamFactory,
)
from tests.factories.keys import make_key

COLLECTIONS = [
    "/api/chains/",
    "/api/providers/",
    "/api/models/",
    "/api/teams/",
    "/api/applications/",
    "/api/agents/",
    "/api/keys/",
    "/api/routing-rules/",
    "/api/aliases/",
]
DETAILS = [
    "/api/chains/{chain}/",
    "/api/providers/{provider}/",
    "/api/models/{model}/",
    "/api/teams/{team}/",
    "/api/applications/{application}/",
    "/api/agents/{agent}/",
    "/api/keys/{key}/",
    "/api/routing-rules/{rule}/",
    "/api/aliases/{alias}/",
]
WRITES = [("post", url) for url in COLLECTIONS] + [
    (method, url) for url in DETAILS for method in ("put", "patch", "delete")
]
READ_STATUS = {"admin": 200, "bi_read_only": 403, "user": 403, "anonymous": 401}
AUDIT_READ_STATUS = {"admin": 200, "bi_read_only": 200, "user": 403, "anonymous": 401}


@pytest.fixture
def objects(db, django_user_model):
    """One of every catalog object, so every detail URL exists."""
    owner = django_user_model.objects.create_user(username="owner")
    provider = ProviderFactory(name="spare-provider")
    model = LlmModelFactory(name="spare-model", provider=provider)
    return {
        "chain": ChainFactory().pk,
        "provider": provider.pk,
        "model": model.pk,
        "team": TeamFactory().pk,
        "application": ApplicationFactory().pk,
        "agent": AgentFactory().pk,
        "key": make_key(user=owner).key.pk,
        "rule": RoutingRuleFactory().pk,
        "alias": AliasFactory().pk,
    }


def state() -> dict[str, object]:
    """Everything a write could change."""
    return {
        model.__name__: sorted(model.objects.values_list("pk", flat=True))
        for model in (FallbackChain, Provider, LlmModel, Team, Application, Agent, RoutingRule, Alias, AuditEvent)
    } | {"keys": sorted(ApiKey.objects.values_list("pk", "revoked_at"))}


@pytest.fixture(params=["bi_read_only", "user", "anonymous"])
def denied(request, db, django_user_model):
    """Each role that may not configure anything: (role, client, expected status)."""
    role = request.param
    if role == "anonymous":
        return role, Client(), 401
    user = django_user_model.objects.create_user(username=f"{role}-member", password=PASSWORD)
    user.groups.add(Group.objects.get(name=role))
    client = Client()
    client.force_login(user)
    return role, client, 403


@pytest.mark.parametrize("url", COLLECTIONS + DETAILS)
def test_read_endpoints_are_admin_only(role_client, objects, url):
    role, client = role_client

    response = client.get(url.format(**objects))

    assert response.status_code == READ_STATUS[role]


@pytest.mark.parametrize(("method", "url"), WRITES)
def test_write_endpoints_refuse_other_roles_and_change_nothing(denied, objects, method, url):
    _role, client, expected = denied
    before = state()

    response = getattr(client, method)(url.format(**objects), {"name": "x"}, content_type="application/json")

    assert response.status_code == expected
    assert state() == before


def test_denied_response_explains_the_role(user_client, anon_client, objects):
    assert user_client.get("/api/chains/").json() == {"detail": "Only the admin role may use this endpoint."}
    assert anon_client.get("/api/chains/").json() == {"detail": "Authentication credentials were not provided."}


def test_schema_is_admin_only(role_client):
    role, client = role_client

    response = client.get("/api/schema/", {"format": "json"})

    assert response.status_code == READ_STATUS[role]


def test_schema_refusal_explains_the_role(user_client, anon_client):
    as_user = user_client.get("/api/schema/", {"format": "json"})
    as_anonymous = anon_client.get("/api/schema/", {"format": "json"})

    assert as_user.json() == {"detail": "Only the admin role may use this endpoint."}
    assert as_anonymous.json() == {"detail": "Authentication credentials were not provided."}


def test_audit_read_is_for_admin_and_bi_read_only(role_client):
    role, client = role_client

    response = client.get("/api/audit/")

    assert response.status_code == AUDIT_READ_STATUS[role]


def token_client(token: str) -> Client:
    return Client(headers={"Authorization": f"Token {token}"})


def token_of(user) -> str:
    return console_token_create(actor=None, user=user, name="script")[1]


def test_token_auth_for_admin(admin_user, objects):
    secret = token_of(admin_user)

    response = token_client(secret).get("/api/chains/")

    assert response.status_code == 200
    assert response.json()["count"] == 1


def test_token_auth_can_write_without_csrf(admin_user, catalog):
    secret = token_of(admin_user)
    client = Client(enforce_csrf_checks=True, headers={"Authorization": f"Token {secret}"})

    response = client.post("/api/teams/", {"name": "Scripted"}, content_type="application/json")

    assert response.status_code == 201
    assert AuditEvent.objects.get(action="team.create").actor_name == "alice"


def test_session_auth_write_needs_csrf(admin_user, catalog):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    response = client.post("/api/teams/", {"name": "Forged"}, content_type="application/json")

    assert response.status_code == 403
    assert response.json()["detail"].startswith("CSRF Failed")
    assert Team.objects.count() == 0


def test_token_auth_respects_roles(bi_user, plain_user):
    bi_token = token_of(bi_user)
    user_token = token_of(plain_user)

    assert token_client(bi_token).get("/api/chains/").status_code == 403
    assert token_client(bi_token).get("/api/audit/").status_code == 200
    assert token_client(user_token).get("/api/audit/").status_code == 403


def test_invalid_token_is_refused(db):
    response = token_client("0" * 40).get("/api/chains/")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Token realm="api"'
    assert response.json() == {"detail": "Invalid token."}


def test_token_from_create_api_token_command_works(admin_user, capsys):
    call_command("create_api_token", "alice")
    token = capsys.readouterr().out.strip()

    response = token_client(token).get("/api/providers/")

    assert response.status_code == 200
