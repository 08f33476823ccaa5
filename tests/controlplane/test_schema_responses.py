"""Contract test: what every API operation answers matches the OpenAPI schema /api/schema/ publishes.

Each operation of the schema is called for real as the admin, on a catalog, keys, chains, rules, alerts with
their deliveries, request logs and circuits rich enough that nullable fields show both a value and null. The
body is validated against the response schema declared for the status it got (`$ref`s resolved, OpenAPI 3.0
semantics: `nullable`, `readOnly`/`writeOnly`, enums, formats), with every object of the schema closed: a field
the schema does not declare is drift too. The main error answers (400, 404, 409) are checked the same way
against what the operation declares for them (`core.api.declare_error_responses` declares every operation's errors
as the API-wide `ApiError`); an answer with a status the operation does not declare is drift too.
"""

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

import pytest
from django.db import transaction
from django.http import HttpResponse, JsonResponse
from django.test import Client
from django.utils import timezone
from jsonschema.exceptions import ValidationError
from openapi_schema_validator import OAS30ReadValidator, OAS31Validator

from alerts.delivery import deliveries_send
from alerts.models import Alert
from alerts.services import RuleInput, alert_open, alert_rule_create, alert_rule_delete
from catalog.enums import ScopeType
from catalog.services import api_key_create, api_key_revoke
from chains.services import ChainInput, EntryInput, chain_create
from health.breaker import ManualClock, MemoryEngine, Outcome, use_engine
from health.events import circuit_events_flush_local
from health.services import breaker_override_set, circuit_force_open, circuit_reset, provider_drain
from tests.conftest import _make_user
from tests.factories import (
    AgentFactory,
    AliasFactory,
    ApplicationFactory,
    LlmModelFactory,
    ProviderFactory,
    RoutingRuleFactory,
    TeamFactory,
)
from tests.factories.requestlogs import fallback, insert_logs, log_record

pytestmark = pytest.mark.django_db

METHODS = ("get", "post", "put", "patch", "delete")

# --- the published schema and the validator ------------------------------------------------------------------

_published: dict[str, Any] = {}


def published_schema(client: Client) -> dict[str, Any]:
    """The document /api/schema/ serves (what SDKs are generated from), fetched once per run."""
    if not _published:
        response = client.get("/api/schema/", {"format": "json"})
        assert response.status_code == 200
        _published.update(response.json())
    return _published


def closed(schema: Any) -> Any:
    """A copy of `schema` in which every object that lists its properties allows no others."""
    if isinstance(schema, list):
        return [closed(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    copy = {
        key: ({name: closed(sub) for name, sub in value.items()} if key == "properties" else closed(value))
        for key, value in schema.items()
    }
    if isinstance(schema.get("properties"), dict) and "additionalProperties" not in schema:
        copy["additionalProperties"] = False
    return copy


def _where(error: ValidationError) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


def _reasons(error: ValidationError) -> list[ValidationError]:
    """The innermost failures under an anyOf/oneOf/allOf error, without the null branch's own "not null"."""
    branches = [e for e in error.context or [] if not (e.validator == "enum" and e.validator_value == [None])]
    return [reason for branch in branches for reason in _reasons(branch)] or [error]


def _describe(error: ValidationError) -> str:
    reasons = _reasons(error)
    if reasons == [error]:
        return f"{_where(error)}: {error.message}"
    return f"{_where(error)}: fits no allowed shape: " + "; ".join(f"{_where(r)}: {r.message}" for r in reasons)


def mismatches(document: dict[str, Any], schema: dict[str, Any], body: Any) -> list[str]:
    """Where `body` breaks `schema`, a schema of `document` (whose `$ref`s it resolves), with every object closed."""
    root = {**closed(schema), "components": {"schemas": closed(document["components"]["schemas"])}}
    # A response is read: OAS30ReadValidator refuses writeOnly fields and does not require them. It reads `nullable`
    # as OpenAPI 3.0.3 defines it: null is allowed only where `nullable: true` stands next to a `type`.
    validator_class = OAS31Validator if document["openapi"].startswith("3.1") else OAS30ReadValidator
    validator = validator_class(root, format_checker=validator_class.FORMAT_CHECKER)
    errors = sorted(validator.iter_errors(body), key=lambda e: [str(p) for p in e.absolute_path])
    return [_describe(error) for error in errors]


def declared_response(document: dict[str, Any], path: str, method: str, status: int) -> dict[str, Any] | None:
    responses = document["paths"][path][method]["responses"]
    return responses.get(str(status)) or responses.get(f"{str(status)[0]}XX") or responses.get("default")


def operations(document: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """operationId -> (path, method) for every operation of the document."""
    return {
        operation["operationId"]: (path, method)
        for path, item in document["paths"].items()
        for method, operation in item.items()
        if method in METHODS
    }


def contract_problems(document: dict[str, Any], operation_id: str, response: Any) -> list[str]:
    """Everything in which `response` (a real answer of `operation_id`) departs from the document."""
    path, method = operations(document)[operation_id]
    status = response.status_code
    declared = declared_response(document, path, method, status)
    if declared is None:
        statuses = sorted(document["paths"][path][method]["responses"])
        return [f"answered {status}, a status the schema does not declare (declared: {', '.join(statuses)})"]
    elif "content" not in declared:
        return [] if not response.content else [f"answered {status} with a body; the schema declares none"]
    else:
        content_type = response["Content-Type"].split(";")[0]
        if content_type not in declared["content"]:
            return [f"answered {status} as {content_type}; the schema declares {', '.join(declared['content'])}"]
        schema = declared["content"][content_type]["schema"]
    if not response.content:
        return [f"answered {status} with no body; the schema declares one"]
    return [f"{status} {problem}" for problem in mismatches(document, schema, json.loads(response.content))]


# --- the world every operation is called in --------------------------------------------------------------------


# What the cases refer to (w.chain, w.logs[1], ...): made through the services and the factories.
World = SimpleNamespace


@pytest.fixture(scope="module")
def webhook_url() -> Iterator[str]:
    """A local webhook receiver that answers 200 to every POST (one for the module: stopping one takes a poll)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}/hook/secret"
    server.shutdown()
    server.server_close()


def _refused_url() -> str:
    """A local address nothing listens on: a delivery there fails with a connection error."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/hook"


@pytest.fixture
def engine() -> Iterator[MemoryEngine]:
    """A memory breaker engine on a clock at the real time (holds are compared with it), in use by the app."""
    engine = MemoryEngine(clock=ManualClock(round(time.time(), 3)))
    with use_engine(engine):
        yield engine


def trip(engine: MemoryEngine, provider: str, model: str) -> None:
    """Open a circuit under the default thresholds: ten 503s in a row."""
    for _ in range(10):
        engine.record(engine.allow(provider, model), Outcome.of_status(503))


@pytest.fixture
def world(admin_user, django_user_model, engine, webhook_url) -> World:
    """Every kind of object the API shows, each in the variants that fill its optional fields or leave them null."""
    o: dict[str, Any] = {}
    actor = admin_user
    # Catalog: providers with and without the optional values, models, teams, applications, agents.
    o["openai"] = ProviderFactory(name="openai")
    o["anthropic"] = ProviderFactory(name="anthropic", protocol="anthropic", api_key="")
    o["azure"] = ProviderFactory(
        name="azure",
        protocol="azure",
        api_version="2024-10-21",
        deployments={"gpt-4o": "gpt-4o-prod"},
        first_token_timeout_seconds=2.5,
        idle_timeout_seconds=10.0,
    )
    o["unused_provider"] = ProviderFactory(name="unused")
    o["gpt4o"] = LlmModelFactory(name="gpt-4o", provider=o["openai"])
    o["mini"] = LlmModelFactory(name="gpt-4o-mini", provider=o["openai"])
    o["claude"] = LlmModelFactory(name="claude-sonnet", provider=o["anthropic"], capabilities=["text", "vision"])
    o["unused_model"] = LlmModelFactory(name="unused-model", provider=o["openai"])
    o["team"] = TeamFactory(name="core")
    o["unused_team"] = TeamFactory(name="unused-team")
    o["application"] = ApplicationFactory(name="app", team=o["team"])
    o["loose_application"] = ApplicationFactory(name="loose")
    o["agent"] = AgentFactory(name="bot", application=o["application"])
    o["loose_agent"] = AgentFactory(name="free")
    # Gateway keys: fully scoped, bare, revoked, and one of a deactivated owner.
    o["key"] = api_key_create(
        actor=actor, name="scoped", user=admin_user, team=o["team"], application=o["application"], agent=o["agent"]
    ).key
    o["bare_key"] = api_key_create(actor=actor, name="bare", user=admin_user).key
    revoked = api_key_create(actor=actor, name="revoked", user=admin_user).key
    api_key_revoke(actor=actor, key=revoked)
    owner = _make_user(django_user_model, "olga", "user")
    api_key_create(actor=actor, name="owner away", user=owner)
    owner.is_active = False
    owner.save()
    # Chains: a global one with a provider override, a team one with a resilience policy.
    o["chain"] = chain_create(
        actor=actor,
        data=ChainInput(
            name="4o fallback",
            source_model="gpt-4o",
            entries=[EntryInput(model="claude-sonnet"), EntryInput(model="gpt-4o", provider="azure")],
        ),
    )
    o["team_chain"] = chain_create(
        actor=actor,
        data=ChainInput(
            name="mini fallback",
            source_model="gpt-4o-mini",
            entries=[EntryInput(model="claude-sonnet")],
            scope_type=ScopeType.TEAM,
            scope_id=o["team"].pk,
            resilience={"enabled": True},
        ),
    )
    # Routing.
    o["rule"] = RoutingRuleFactory(name="mini to 4o", source_model=o["mini"], target_model=o["gpt4o"])
    RoutingRuleFactory(
        name="team rule",
        source_model=o["claude"],
        target_model=o["mini"],
        scope_type=ScopeType.TEAM,
        scope_id=o["team"].pk,
    )
    o["alias"] = AliasFactory(name="fast", model=o["mini"])
    # Alerts: rules of each kind; alerts firing, resolved, and of a deleted rule; deliveries delivered and failed.
    o["alert_rule"] = alert_rule_create(
        actor=actor,
        data=RuleInput(name="4o open", kind="circuit_open", provider="openai", model="gpt-4o", webhook_url=webhook_url),
    )
    failing_rule = alert_rule_create(
        actor=actor, data=RuleInput(name="degraded", kind="degraded", webhook_url=_refused_url(), body_format="slack")
    )
    alert_rule_create(actor=actor, data=RuleInput(name="exhausted", kind="exhausted", min_count=3, enabled=False))
    gone_rule = alert_rule_create(actor=actor, data=RuleInput(name="gone", kind="circuit_open"))
    now = timezone.now()
    with transaction.atomic():
        o["alert"] = alert_open(
            rule=o["alert_rule"], subject="openai/gpt-4o", figures={"open_minutes": 6}, summary="Open.", now=now
        )
        o["failed_alert"] = alert_open(
            rule=failing_rule, subject="gpt-4o", figures={"share": 0.5, "requests": 40}, summary="Degraded.", now=now
        )
        resolved = alert_open(rule=gone_rule, subject="x/y", figures={}, summary="", now=now)
    assert resolved is not None
    alert_rule_delete(actor=actor, rule_id=gone_rule.pk)
    deliveries_send()
    assert Alert.objects.filter(rule__isnull=True).exists()
    # Request logs: served, fallen back with every attempt field, failed, client gone, of deleted objects.
    o["logs"] = insert_logs(
        log_record(key=o["key"], stream=True),
        log_record(
            key=o["bare_key"],
            chain_id=o["chain"].pk,
            **fallback(served_provider="anthropic", served_model="claude-sonnet"),
            attempts=[
                {
                    "provider": "openai",
                    "model": "gpt-4o",
                    "status": 429,
                    "error": None,
                    "duration_ms": 12.0,
                    "next": "move_on",
                    "class": "rate_limit",
                    "retry_after": 2.0,
                },
                {
                    "provider": "anthropic",
                    "model": "claude-sonnet",
                    "status": None,
                    "error": "timeout",
                    "duration_ms": None,
                    "next": "continue",
                    "class": "timeout",
                    "malformed_events": 1,
                    "usage": {"prompt_tokens": 10, "completion_tokens": None},
                },
                {
                    "provider": "anthropic",
                    "model": "claude-sonnet",
                    "status": 200,
                    "error": None,
                    "duration_ms": 80.0,
                    "continuation": True,
                    "usage": {"prompt_tokens": 10, "completion_tokens": 5},
                },
            ],
        ),
        log_record(
            status=502,
            error_kind="upstream_error",
            served_provider="",
            served_model="",
            ttfb_ms=None,
            tokens_in=None,
            tokens_out=None,
            cost_usd=None,
            attempts=[{"provider": "openai", "model": "gpt-4o", "status": 502, "error": None, "duration_ms": 5.0}],
        ),
        log_record(status=499, error_kind="client_gone", cost_usd=None),
        log_record(user_id=999_999, team_id=999_999, application_id=999_999, agent_id=999_999, key_id=999_999),
    )
    # Circuits: one tripped (its transitions in the history), one forced open, a drained provider, an override.
    trip(engine, "openai", "gpt-4o")
    circuit_reset(actor=actor, provider="openai", model="gpt-4o")
    trip(engine, "openai", "gpt-4o")
    for provider, model in (("openai", "gpt-4o-mini"), ("anthropic", "claude-sonnet"), ("azure", "gpt-4o")):
        engine.record(engine.allow(provider, model), Outcome.of_status(200))
    circuit_events_flush_local(engine)
    circuit_force_open(actor=actor, provider="anthropic", model="claude-sonnet", reason="incident 42", minutes=30)
    provider_drain(actor=actor, provider="azure", reason="maintenance", minutes=None)
    breaker_override_set(
        actor=actor, provider="openai", model="gpt-4o", data={"failure_threshold": 3, "failure_status_codes": [503]}
    )
    return World(**o)


# --- the cases ---------------------------------------------------------------------------------------------------

Call = Callable[[Client, World], Any]


@dataclass(frozen=True)
class Case:
    operation: str  # the schema's operationId
    status: int  # what the call must answer
    call: Call
    label: str = ""

    @property
    def id(self) -> str:
        return f"{self.operation}-{self.status}" + (f"-{self.label}" if self.label else "")


def get(url: str | Callable[[World], str], params: dict[str, Any] | None = None) -> Call:
    return lambda client, w: client.get(url(w) if callable(url) else url, params or {})


def send(method: str, url: str | Callable[[World], str], body: Any = None) -> Call:
    def call(client: Client, w: World) -> Any:
        payload = body(w) if callable(body) else body
        target = url(w) if callable(url) else url
        return getattr(client, method)(target, json.dumps(payload), content_type="application/json")

    return call


def delete(url: str | Callable[[World], str], params: str = "") -> Call:
    return lambda client, w: client.delete((url(w) if callable(url) else url) + params)


def chain_body(w: World, **fields: Any) -> dict[str, Any]:
    return {
        "name": "4o fallback",
        "source_model": "gpt-4o",
        "entries": [{"model": "claude-sonnet"}, {"model": "gpt-4o-mini", "provider": None}],
        "scope": {"type": "global"},
        "enabled": True,
        "version": w.chain.version,
        **fields,
    }


def resilience_put(client: Client, w: World) -> Any:
    version = client.get("/api/resilience/defaults/").json()["version"]
    body = {"policy": {"enabled": True, "max_attempts": 3}, "version": version}
    return client.put("/api/resilience/defaults/", json.dumps(body), content_type="application/json")


PROVIDER = "/api/providers/"
MODEL = "/api/models/"
TEAM = "/api/teams/"
APPLICATION = "/api/applications/"
AGENT = "/api/agents/"
KEY = "/api/keys/"
CHAIN = "/api/chains/"
RULE = "/api/routing-rules/"
ALIAS = "/api/aliases/"
ALERT_RULE = "/api/alerts/rules/"
OVERRIDE = "/api/breaker-config/overrides/openai/gpt-4o/"

SUCCESSES = [
    # Providers.
    Case("provider_list", 200, get(PROVIDER)),
    Case(
        "provider_create",
        201,
        send("post", PROVIDER, {"name": "mistral", "base_url": "http://127.0.0.1:9/m", "api_key": "sk-1"}),
    ),
    Case("provider_detail", 200, get(lambda w: f"{PROVIDER}{w.azure.pk}/")),
    Case(
        "provider_update",
        200,
        send(
            "put",
            lambda w: f"{PROVIDER}{w.azure.pk}/",
            {
                "name": "azure",
                "protocol": "azure",
                "base_url": "http://127.0.0.1:9/azure",
                "api_version": "2024-10-21",
                "deployments": {"gpt-4o": "gpt-4o-eu"},
                "idle_timeout_seconds": 20.0,
            },
        ),
    ),
    Case("provider_partial_update", 200, send("patch", lambda w: f"{PROVIDER}{w.openai.pk}/", {"read_timeout": 30})),
    Case("provider_delete", 204, delete(lambda w: f"{PROVIDER}{w.unused_provider.pk}/")),
    # Models.
    Case("model_list", 200, get(MODEL)),
    Case("model_create", 201, send("post", MODEL, {"name": "o3", "provider": "openai", "capabilities": ["text"]})),
    Case("model_detail", 200, get(lambda w: f"{MODEL}{w.claude.pk}/")),
    Case(
        "model_update",
        200,
        send(
            "put",
            lambda w: f"{MODEL}{w.claude.pk}/",
            {"name": "claude-sonnet", "provider": "anthropic", "input_price_per_mtok": "3.25", "context_window": 1000},
        ),
    ),
    Case("model_partial_update", 200, send("patch", lambda w: f"{MODEL}{w.mini.pk}/", {"max_output_tokens": 512})),
    Case("model_delete", 204, delete(lambda w: f"{MODEL}{w.unused_model.pk}/")),
    # Teams, applications, agents.
    Case("team_list", 200, get(TEAM)),
    Case("team_create", 201, send("post", TEAM, {"name": "research"})),
    Case("team_detail", 200, get(lambda w: f"{TEAM}{w.team.pk}/")),
    Case("team_update", 200, send("put", lambda w: f"{TEAM}{w.team.pk}/", {"name": "core2"})),
    Case("team_partial_update", 200, send("patch", lambda w: f"{TEAM}{w.team.pk}/", {"name": "core3"})),
    Case("team_delete", 204, delete(lambda w: f"{TEAM}{w.unused_team.pk}/")),
    Case("application_list", 200, get(APPLICATION)),
    Case("application_create", 201, send("post", APPLICATION, {"name": "etl", "team": "core"})),
    Case("application_detail", 200, get(lambda w: f"{APPLICATION}{w.loose_application.pk}/")),
    Case(
        "application_update",
        200,
        send("put", lambda w: f"{APPLICATION}{w.loose_application.pk}/", {"name": "loose", "team": None}),
    ),
    Case(
        "application_partial_update",
        200,
        send("patch", lambda w: f"{APPLICATION}{w.application.pk}/", {"name": "app2"}),
    ),
    Case("application_delete", 204, delete(lambda w: f"{APPLICATION}{w.loose_application.pk}/")),
    Case("agent_list", 200, get(AGENT)),
    Case("agent_create", 201, send("post", AGENT, {"name": "crawler", "application": "app"})),
    Case("agent_detail", 200, get(lambda w: f"{AGENT}{w.agent.pk}/")),
    Case("agent_update", 200, send("put", lambda w: f"{AGENT}{w.loose_agent.pk}/", {"name": "free2"})),
    Case("agent_partial_update", 200, send("patch", lambda w: f"{AGENT}{w.agent.pk}/", {"application": None})),
    Case("agent_delete", 204, delete(lambda w: f"{AGENT}{w.loose_agent.pk}/")),
    # Gateway keys.
    Case("key_list", 200, get(KEY)),
    Case("key_create", 201, send("post", KEY, {"name": "ci", "team": "core", "application": "app"})),
    Case("key_detail", 200, get(lambda w: f"{KEY}{w.key.pk}/")),
    Case("key_update", 200, send("put", lambda w: f"{KEY}{w.key.pk}/", {"name": "scoped2", "team": "core"})),
    Case("key_partial_update", 200, send("patch", lambda w: f"{KEY}{w.bare_key.pk}/", {"name": "bare2"})),
    Case("key_revoke", 204, delete(lambda w: f"{KEY}{w.key.pk}/")),
    # Chains and the default resilience policy.
    Case("chain_list", 200, get(CHAIN)),
    Case(
        "chain_create",
        201,
        send(
            "post",
            CHAIN,
            {"name": "claude fallback", "source_model": "claude-sonnet", "entries": [{"model": "gpt-4o"}]},
        ),
    ),
    Case("chain_detail", 200, get(lambda w: f"{CHAIN}{w.team_chain.pk}/")),
    Case("chain_update", 200, send("put", lambda w: f"{CHAIN}{w.chain.pk}/", chain_body)),
    Case(
        "chain_partial_update",
        200,
        send("patch", lambda w: f"{CHAIN}{w.chain.pk}/", lambda w: {"enabled": False, "version": w.chain.version}),
    ),
    Case("chain_delete", 204, delete(lambda w: f"{CHAIN}{w.chain.pk}/")),
    Case("resilience_defaults", 200, get("/api/resilience/defaults/")),
    Case("resilience_defaults_update", 200, resilience_put),
    # Routing rules and aliases.
    Case("routing_rule_list", 200, get(RULE)),
    Case(
        "routing_rule_create",
        201,
        send(
            "post",
            RULE,
            lambda w: {
                "name": "4o to claude",
                "source_model": "gpt-4o",
                "target_model": "claude-sonnet",
                "scope": {"type": "team", "id": w.team.pk},
            },
        ),
    ),
    Case("routing_rule_detail", 200, get(lambda w: f"{RULE}{w.rule.pk}/")),
    Case(
        "routing_rule_update",
        200,
        send(
            "put",
            lambda w: f"{RULE}{w.rule.pk}/",
            {"name": "mini to claude", "source_model": "gpt-4o-mini", "target_model": "claude-sonnet"},
        ),
    ),
    Case("routing_rule_partial_update", 200, send("patch", lambda w: f"{RULE}{w.rule.pk}/", {"enabled": False})),
    Case("routing_rule_delete", 204, delete(lambda w: f"{RULE}{w.rule.pk}/")),
    Case("alias_list", 200, get(ALIAS)),
    Case("alias_create", 201, send("post", ALIAS, {"name": "smart", "model": "claude-sonnet"})),
    Case("alias_detail", 200, get(lambda w: f"{ALIAS}{w.alias.pk}/")),
    Case("alias_update", 200, send("put", lambda w: f"{ALIAS}{w.alias.pk}/", {"name": "fast", "model": "gpt-4o"})),
    Case("alias_partial_update", 200, send("patch", lambda w: f"{ALIAS}{w.alias.pk}/", {"name": "quick"})),
    Case("alias_delete", 204, delete(lambda w: f"{ALIAS}{w.alias.pk}/")),
    # Audit log.
    Case("audit_event_list", 200, get("/api/audit/", {"page_size": 100})),
    # Request logs.
    Case("request_log_list", 200, get("/api/request-logs/")),
    Case("request_log_get", 200, get(lambda w: f"/api/request-logs/{w.logs[1].request_id}/")),
    # Alerts.
    Case("alert_rule_list", 200, get(ALERT_RULE)),
    Case(
        "alert_rule_create",
        201,
        send("post", ALERT_RULE, {"name": "mini degraded", "kind": "degraded", "model": "gpt-4o-mini"}),
    ),
    Case("alert_rule_detail", 200, get(lambda w: f"{ALERT_RULE}{w.alert_rule.pk}/")),
    Case(
        "alert_rule_update",
        200,
        send(
            "put",
            lambda w: f"{ALERT_RULE}{w.alert_rule.pk}/",
            {"name": "4o open", "kind": "circuit_open", "provider": "openai", "model": "gpt-4o", "minutes": 10},
        ),
    ),
    Case("alert_rule_delete", 204, delete(lambda w: f"{ALERT_RULE}{w.alert_rule.pk}/")),
    Case("alert_list", 200, get("/api/alerts/")),
    Case("alert_detail", 200, get(lambda w: f"/api/alerts/{w.alert.pk}/")),
    Case("alert_detail", 200, get(lambda w: f"/api/alerts/{w.failed_alert.pk}/"), "undelivered"),
    # Circuits, holds, history, breaker configuration.
    Case("circuit_list", 200, get("/api/circuits/")),
    Case("circuit_reset", 200, send("post", "/api/circuits/reset/", {"provider": "openai", "model": "gpt-4o"})),
    Case(
        "circuit_force_open",
        201,
        send(
            "post",
            "/api/circuits/force-open/",
            {"provider": "openai", "model": "gpt-4o-mini", "reason": "incident", "minutes": 15},
        ),
    ),
    Case("provider_drain", 201, send("post", "/api/circuits/drain/", {"provider": "openai", "reason": "moving"})),
    Case(
        "circuit_release",
        200,
        send("post", "/api/circuits/release/", {"provider": "anthropic", "model": "claude-sonnet"}),
    ),
    Case("circuit_event_list", 200, get("/api/circuits/openai/gpt-4o/events/")),
    Case("circuit_event_list", 200, get("/api/circuits/anthropic/claude-sonnet/events/"), "held"),
    Case("breaker_config_detail", 200, get("/api/breaker-config/")),
    Case("breaker_config_update", 200, send("put", "/api/breaker-config/", {"failure_threshold": 6})),
    Case("breaker_override_detail", 200, get(OVERRIDE)),
    Case("breaker_override_set", 200, send("put", OVERRIDE, {"window_seconds": 30, "failure_status_codes": None})),
    Case("breaker_override_delete", 204, delete(OVERRIDE)),
]

ERRORS = [
    # 400: a field's message, from the serializers and from the services.
    Case("provider_create", 400, send("post", PROVIDER, {"name": "", "base_url": "x"}), "rule"),
    Case("model_create", 400, send("post", MODEL, {"name": "m", "provider": "openai", "context_window": "x"}), "type"),
    Case("chain_create", 400, send("post", CHAIN, {"name": "c", "source_model": "gpt-4o", "entries": []}), "rule"),
    Case("chain_partial_update", 400, send("patch", lambda w: f"{CHAIN}{w.chain.pk}/", {"enabled": True}), "version"),
    Case("key_create", 400, send("post", KEY, {"name": "k", "team": "nope"}), "unknown"),
    Case("routing_rule_create", 400, send("post", RULE, {"name": "r", "source_model": "", "target_model": ""})),
    Case("request_log_list", 400, get("/api/request-logs/", {"range": "forever"}), "filter"),
    Case("alert_rule_create", 400, send("post", ALERT_RULE, {"name": "x", "kind": "nope"}), "choice"),
    Case("alert_list", 400, get("/api/alerts/", {"state": "nope"}), "filter"),
    Case("circuit_force_open", 400, send("post", "/api/circuits/force-open/", {}), "missing"),
    Case("circuit_event_list", 400, get("/api/circuits/openai/gpt-4o/events/", {"limit": 0}), "limit"),
    Case("breaker_config_update", 400, send("put", "/api/breaker-config/", {"window_seconds": 7200}), "range"),
    Case("breaker_override_set", 400, send("put", OVERRIDE, {"failure_status_codes": [200, 200]}), "codes"),
    Case(
        "team_create",
        415,
        lambda client, w: client.post(TEAM, "name=x", content_type="application/x-www-form-urlencoded"),
        "form body",
    ),
    # 404: no such object.
    Case("provider_detail", 404, get(f"{PROVIDER}999999/")),
    Case("audit_event_list", 404, get("/api/audit/", {"page": "x"}), "page"),
    Case("key_partial_update", 404, send("patch", f"{KEY}999999/", {"name": "x"})),
    Case("chain_detail", 404, get(f"{CHAIN}999999/")),
    Case("alias_delete", 404, delete(f"{ALIAS}999999/")),
    Case("request_log_get", 404, get("/api/request-logs/0123456789abcdef0123456789abcdef/")),
    Case("alert_detail", 404, get("/api/alerts/999999/")),
    Case("alert_rule_update", 404, send("put", f"{ALERT_RULE}999999/", {"name": "x", "kind": "exhausted"})),
    Case("breaker_override_detail", 404, get("/api/breaker-config/overrides/openai/gpt-4o-mini/")),
    Case("circuit_release", 404, send("post", "/api/circuits/release/", {"provider": "openai", "model": "gpt-4o"})),
    # 409: stale versions, a hold already in force, an object still referenced.
    Case("chain_update", 409, send("put", lambda w: f"{CHAIN}{w.chain.pk}/", lambda w: chain_body(w, version=99))),
    Case("chain_delete", 409, delete(lambda w: f"{CHAIN}{w.chain.pk}/", "?version=99"), "stale"),
    Case(
        "circuit_force_open",
        409,
        send(
            "post", "/api/circuits/force-open/", {"provider": "anthropic", "model": "claude-sonnet", "reason": "again"}
        ),
        "held",
    ),
    Case("provider_delete", 409, delete(lambda w: f"{PROVIDER}{w.openai.pk}/"), "referenced"),
    Case("model_delete", 409, delete(lambda w: f"{MODEL}{w.claude.pk}/"), "referenced"),
]


# --- the tests ---------------------------------------------------------------------------------------------------


def test_every_operation_of_the_schema_has_a_case(admin_client):
    document = published_schema(admin_client)

    assert sorted({case.operation for case in SUCCESSES}) == sorted(operations(document))
    assert {case.operation for case in ERRORS} <= set(operations(document))


@pytest.mark.parametrize("case", SUCCESSES, ids=lambda case: case.id)
def test_each_operation_answers_what_the_schema_declares(admin_client, world, case):
    document = published_schema(admin_client)

    response = case.call(admin_client, world)

    assert response.status_code == case.status, response.content[:500]
    problems = contract_problems(document, case.operation, response)
    assert not problems, f"{case.operation} departs from the schema:\n" + "\n".join(problems)


@pytest.mark.parametrize("case", ERRORS, ids=lambda case: case.id)
def test_each_error_answer_has_the_declared_error_shape(admin_client, world, case):
    document = published_schema(admin_client)

    response = case.call(admin_client, world)

    assert response.status_code == case.status, response.content[:500]
    problems = contract_problems(document, case.operation, response)
    assert not problems, f"{case.operation} departs from the schema:\n" + "\n".join(problems)


# --- the checker catches drift -----------------------------------------------------------------------------------

PROVIDER_SCHEMA = {"$ref": "#/components/schemas/Provider"}
REQUEST_LOG_SCHEMA = {"$ref": "#/components/schemas/RequestLog"}


def test_the_checker_reports_a_wrong_type_a_missing_field_and_a_null(admin_client, world):
    document = published_schema(admin_client)
    good = admin_client.get(f"{PROVIDER}{world.azure.pk}/").json()
    missing = {key: value for key, value in good.items() if key != "has_api_key"}

    assert mismatches(document, PROVIDER_SCHEMA, good) == []
    assert mismatches(document, PROVIDER_SCHEMA, {**good, "read_timeout": "60"}) == [
        "$.read_timeout: '60' is not of type 'number'"
    ]
    assert mismatches(document, PROVIDER_SCHEMA, missing) == ["$: 'has_api_key' is a required property"]
    assert "$.name: None for not nullable" in mismatches(document, PROVIDER_SCHEMA, {**good, "name": None})
    assert mismatches(document, PROVIDER_SCHEMA, {**good, "first_token_timeout_seconds": None}) == []


def test_the_checker_reports_an_undeclared_field_and_a_write_only_one(admin_client, world):
    document = published_schema(admin_client)
    good = admin_client.get(f"{PROVIDER}{world.azure.pk}/").json()
    provider_input = {"$ref": "#/components/schemas/ProviderInput"}
    written = {"name": "p", "base_url": "http://x", "api_key": "sk-1"}

    assert mismatches(document, PROVIDER_SCHEMA, {**good, "api_key": "sk-1"}) == [
        "$: Additional properties are not allowed ('api_key' was unexpected)"
    ]
    assert mismatches(document, provider_input, written) == ["$.api_key: Tried to read write-only property with sk-1"]


def test_the_checker_reports_drift_inside_nullable_references_enums_and_formats(admin_client, world):
    document = published_schema(admin_client)
    good = admin_client.get(f"/api/request-logs/{world.logs[0].request_id}/").json()
    assert good["key"] is not None and good["status_class"] == "2xx"

    assert mismatches(document, REQUEST_LOG_SCHEMA, good) == []
    assert mismatches(document, REQUEST_LOG_SCHEMA, {**good, "key": None, "status_class": None}) == []
    (nested,) = mismatches(document, REQUEST_LOG_SCHEMA, {**good, "key": {**good["key"], "revoked": "no"}})
    assert nested == "$.key: fits no allowed shape: $.key.revoked: 'no' is not of type 'boolean'"
    assert mismatches(document, REQUEST_LOG_SCHEMA, {**good, "key": {**good["key"], "secret": "s"}}) == [
        "$.key: fits no allowed shape: $.key: Additional properties are not allowed ('secret' was unexpected)"
    ]
    (enum,) = mismatches(document, REQUEST_LOG_SCHEMA, {**good, "status_class": "1xx"})
    assert enum.startswith("$.status_class: fits no allowed shape: $.status_class: '1xx' is not one of ['2xx', ")
    assert mismatches(document, REQUEST_LOG_SCHEMA, {**good, "created_at": "yesterday"}) == [
        "$.created_at: 'yesterday' is not a 'date-time'"
    ]
    assert mismatches(document, REQUEST_LOG_SCHEMA, {**good, "cost_usd": "0.123456789"}) == [
        "$.cost_usd: '0.123456789' does not match '^-?\\\\d{0,6}(?:\\\\.\\\\d{0,8})?$'"
    ]


def test_the_checker_refuses_null_for_a_nullable_all_of_reference_as_oas_3_0_3_does(admin_client, world):
    # drf-spectacular's own form for a nullable nested serializer: strict 3.0.3 tools (this validator, SDK
    # generators) refuse null there, hence core.api.NullableObjectSerializer.
    document = published_schema(admin_client)
    nullable_all_of = {"allOf": [{"$ref": "#/components/schemas/_Named"}], "nullable": True}
    one_of_null = {"oneOf": [{"$ref": "#/components/schemas/_Named"}, {"$ref": "#/components/schemas/NullEnum"}]}

    assert "$: None for not nullable" in mismatches(document, nullable_all_of, None)
    assert mismatches(document, one_of_null, None) == []
    assert mismatches(document, one_of_null, {"id": 1, "name": None}) == []


def test_the_contract_reports_an_undeclared_status_and_an_unexpected_body(admin_client):
    document = published_schema(admin_client)
    created = JsonResponse({"id": 1}, status=200)
    deleted = HttpResponse(b"{}", status=204, content_type="application/json")
    error = JsonResponse({"message": "no"}, status=400)

    assert contract_problems(document, "team_create", created) == [
        "answered 200, a status the schema does not declare (declared: 201, 400, 401, 403, 409, 413, 415, 429)"
    ]
    assert contract_problems(document, "breaker_config_detail", JsonResponse({"detail": "gone"}, status=404)) == [
        "answered 404, a status the schema does not declare (declared: 200, 401, 403, 429)"
    ]
    assert contract_problems(document, "team_delete", deleted) == ["answered 204 with a body; the schema declares none"]
    assert contract_problems(document, "team_create", error) == [
        "400 $: 'detail' is a required property",
        "400 $: Additional properties are not allowed ('message' was unexpected)",
    ]
