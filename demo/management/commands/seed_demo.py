"""Demo data for `make run`: an admin, providers and models, a routing rule, two aliases, two chains.

The catalog, rules, chains and key are written through the services (actor None: "system"), so each is
validated, audited and published like one made in the console. The demo users are made directly (users
are Django's own, created in the admin; there is no user-create service). Idempotent: a second run
changes nothing except printing the admin password again. Each demo object is made once, when the catalog is:
a team, application, agent or user that already exists under a demo name is used (teams) or left alone, and a
default alert rule renamed or deleted since stays so. The admin's password is set only on an admin the seed
creates; it is printed only while it still signs in.
"""

import secrets
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from alerts.selectors import alert_rule_list
from alerts.services import RuleInput, alert_rule_create
from catalog.enums import ScopeType
from catalog.keys import key_hash
from catalog.models import ApiKey
from catalog.selectors import agent_list, application_list, provider_list, team_list
from catalog.services import (
    AgentInput,
    ApplicationInput,
    LlmModelInput,
    ProviderInput,
    TeamInput,
    agent_create,
    api_key_create,
    application_create,
    llm_model_create,
    provider_create,
    provider_update,
    team_create,
)
from chains.services import ChainInput, EntryInput, chain_create
from routing.services import AliasInput, RoutingRuleInput, alias_create, routing_rule_create

# Each provider speaks its own protocol to the simulator (docs/simulator.md): OpenAI at <sim>/<name>/v1,
# Anthropic Messages at <sim>/anthropic/v1/messages, Azure at <sim>/azure/openai/deployments/<d>/chat/completions.
PROVIDERS = [
    # name, protocol, base URL under the simulator
    ("openai", "openai", "openai/v1"),
    ("anthropic", "anthropic", "anthropic"),
    ("mistral", "openai", "mistral/v1"),
]
# Created after the models: its deployments name one of them (docs/protocols.md, "Provider settings").
AZURE = ("azure-openai", "azure", "azure")
AZURE_API_VERSION = "2024-10-21"
AZURE_DEPLOYMENTS = {"gpt-4o": "gpt-4o-prod"}
MODELS = [
    # name, provider, capabilities, input $/1M, output $/1M, context, max_tokens sent when a client omits it
    ("gpt-4o", "openai", ["text", "vision", "tools", "json_output"], "2.50", "10.00", 128000, 16384),
    ("gpt-4o-mini", "openai", ["text", "vision", "tools", "json_output"], "0.15", "0.60", 128000, 16384),
    ("claude-sonnet-4", "anthropic", ["text", "vision", "tools", "assistant_prefill"], "3.00", "15.00", 200000, 8192),
    ("claude-haiku-3.5", "anthropic", ["text", "tools", "assistant_prefill"], "0.80", "4.00", 200000, 8192),
    ("mistral-large", "mistral", ["text", "tools", "json_output"], "2.00", "6.00", 128000, 8192),
    ("mistral-small", "mistral", ["text", "tools", "json_output"], "0.20", "0.60", 32000, 8192),
]


class Command(BaseCommand):
    help = "Load demo data (admin user, providers, models, a routing rule, two aliases, two chains)."

    def handle(self, *args: Any, **options: Any) -> None:
        sign_in = self._admin()
        with transaction.atomic():
            created = self._catalog()
            if created:
                self._alert_rules()
        key = self._demo_key()
        self.stdout.write(self.style.SUCCESS("Demo data " + ("loaded." if created else "already present.")))
        self.stdout.write(f"Console: {sign_in}")
        self.stdout.write(f"Gateway demo key: {key}")

    def _alert_rules(self) -> None:
        """The three default alert rules (docs/alerts.md), with no webhook: made with the demo catalog only, so
        one renamed or deleted since is not made again."""
        existing = set(alert_rule_list().values_list("name", flat=True))
        for data in (
            RuleInput(name="Circuit open over 5 min", kind="circuit_open", minutes=5),
            RuleInput(name="Degraded: over 20% fallback", kind="degraded"),
            RuleInput(name="Chain exhausted", kind="exhausted"),
        ):
            if data.name not in existing:
                alert_rule_create(actor=None, data=data)

    def _admin(self) -> str:
        """Create the admin once, keeping its password in var/ so every `make run` can print it; how to sign in.

        An admin that exists already (made with `createsuperuser`, or by an earlier run) keeps its password: the
        one in var/ is printed only while it still signs in."""
        path = settings.VAR_DIR / "admin_password"
        user_model = get_user_model()
        user = user_model._default_manager.filter(username="admin").first()
        if user is None:
            password = secrets.token_urlsafe(12)
            user = user_model._default_manager.create_superuser("admin", "admin@example.com", password)
            settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
            path.write_text(password)
            path.chmod(0o600)
        user.groups.add(Group.objects.get(name="admin"))
        password = path.read_text().strip() if path.exists() else ""
        if password and user.check_password(password):
            return f"sign in as  admin / {password}"
        if password:
            return "sign in as  admin (its password was changed since seeding; the one in var/ no longer works)"
        return "sign in as  admin (an existing user: its own password)"

    def _demo_key(self) -> str:
        """A gateway key for the admin, kept in var/ (embedded demo only) so `make run` can print it. An inactive
        admin gets none (and the one kept is forgotten: it does not work while its owner is deactivated)."""
        path = settings.VAR_DIR / "demo_gateway_key"
        admin = get_user_model()._default_manager.get(username="admin")
        if not admin.is_active:
            path.unlink(missing_ok=True)
            return "none (the admin user is deactivated; use a key of an active user)"
        if path.exists():
            secret = path.read_text().strip()
            if ApiKey.objects.filter(hashed_secret=key_hash(secret), revoked_at=None).exists():
                return secret
        settings.VAR_DIR.mkdir(parents=True, exist_ok=True)
        secret = api_key_create(actor=None, name="demo key", user=admin).secret
        path.write_text(secret)
        path.chmod(0o600)
        return secret

    def _catalog(self) -> bool:
        """Create the demo catalog unless there is one already (any provider: the demo's, or the user's own)."""
        base = getattr(settings, "SIMULATOR_URL", "http://127.0.0.1:8001").rstrip("/")
        if provider_list().exists():
            self._protocols_upgrade(base)
            return False
        for name, protocol, path in PROVIDERS:
            provider_create(
                actor=None, data=_provider_input(name, protocol, f"{base}/{path}"), api_key=f"sk-demo-{name}"
            )
        for name, provider, caps, inp, out, ctx, max_out in MODELS:
            llm_model_create(
                actor=None,
                data=LlmModelInput(
                    name=name,
                    provider=provider,
                    capabilities=caps,
                    input_price_per_mtok=Decimal(inp),
                    output_price_per_mtok=Decimal(out),
                    context_window=ctx,
                    max_output_tokens=max_out,
                ),
            )
        name, protocol, path = AZURE
        provider_create(actor=None, data=_provider_input(name, protocol, f"{base}/{path}"), api_key=f"sk-demo-{name}")
        # Teams, the application, the agent and the users outlive a removed catalog (or were made by hand before
        # the first run): one that exists under its demo name is used as it is, never made twice.
        payments = team_list().filter(name="payments").first() or team_create(
            actor=None, data=TeamInput(name="payments")
        )
        support = team_list().filter(name="support").first() or team_create(actor=None, data=TeamInput(name="support"))
        if not application_list().filter(name="checkout").exists():
            application_create(actor=None, data=ApplicationInput(name="checkout", team="payments"))
        if not agent_list().filter(name="refund-bot").exists():
            agent_create(actor=None, data=AgentInput(name="refund-bot", application="checkout"))
        users = get_user_model()._default_manager
        for name, role in (("analyst", "bi_read_only"), ("developer", "user")):
            if not users.filter(username=name).exists():
                users.create_user(name, password=None).groups.add(Group.objects.get(name=role))

        routing_rule_create(
            actor=None,
            data=RoutingRuleInput(
                name="Support drafts on the small model",
                source_model="gpt-4o",
                target_model="gpt-4o-mini",
                scope_type=ScopeType.TEAM,
                scope_id=support.pk,
                enabled=True,
            ),
        )
        alias_create(actor=None, data=AliasInput(name="default", model="gpt-4o"))
        alias_create(actor=None, data=AliasInput(name="fast", model="gpt-4o-mini"))

        chain_create(
            actor=None,
            data=ChainInput(
                name="GPT-4o fallback",
                source_model="gpt-4o",
                entries=[
                    EntryInput("gpt-4o", "azure-openai"),
                    EntryInput("claude-sonnet-4"),
                    EntryInput("mistral-large"),
                ],
            ),
        )
        chain_create(
            actor=None,
            data=ChainInput(
                name="Payments: Claude Sonnet fallback",
                source_model="claude-sonnet-4",
                entries=[EntryInput("gpt-4o"), EntryInput("mistral-large")],
                scope_type=ScopeType.TEAM,
                scope_id=payments.pk,
            ),
        )
        return True

    def _protocols_upgrade(self, base: str) -> None:
        """A demo seeded before the simulator spoke Anthropic and Azure had both on the OpenAI protocol at
        <sim>/<name>/v1: move them to their own protocols. A provider changed by hand is left alone."""
        for name, protocol, path in (PROVIDERS[1], AZURE):
            provider = provider_list().filter(name=name, protocol="openai", base_url=f"{base}/{path}/v1").first()
            if provider is not None:
                provider_update(actor=None, provider=provider, data=_provider_input(name, protocol, f"{base}/{path}"))
                self.stdout.write(f"Demo provider {name} now speaks the {protocol} protocol.")


def _provider_input(name: str, protocol: str, base_url: str) -> ProviderInput:
    """A demo provider's settings; the Azure one gets its api-version and deployments."""
    azure = protocol == "azure"
    return ProviderInput(
        name=name,
        protocol=protocol,
        base_url=base_url,
        connect_timeout=2.0,
        read_timeout=30.0,
        api_version=AZURE_API_VERSION if azure else "",
        deployments=dict(AZURE_DEPLOYMENTS) if azure else {},
    )
