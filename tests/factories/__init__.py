"""factory_boy factories, kept free of surprises: each builds exactly what it names."""

from decimal import Decimal

import factory
from django.contrib.auth import get_user_model

from catalog.enums import ScopeType
from catalog.models import Agent, Application, LlmModel, Provider, Team
from chains.models import ChainEntry, FallbackChain
from routing.models import Alias, Guardrail, RoutingRule


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")


class ProviderFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Provider
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"provider{n}")
    protocol = "openai"
    base_url = factory.LazyAttribute(lambda o: f"http://127.0.0.1:9/{o.name}")
    api_key = "sk-test"


class LlmModelFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = LlmModel
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"model-{n}")
    provider = factory.SubFactory(ProviderFactory)
    capabilities = factory.LazyFunction(lambda: ["text"])
    input_price_per_mtok = Decimal("1.00")
    output_price_per_mtok = Decimal("4.00")
    context_window = 128000


class TeamFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Team

    name = factory.Sequence(lambda n: f"team-{n}")


class ApplicationFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Application

    name = factory.Sequence(lambda n: f"app-{n}")


class AgentFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Agent

    name = factory.Sequence(lambda n: f"agent-{n}")


class ChainFactory(factory.django.DjangoModelFactory):
    """A chain with `entries` (a list of LlmModel) written as ChainEntry rows; no audit event."""

    class Meta:
        model = FallbackChain
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"chain-{n}")
    source_model = factory.SubFactory(LlmModelFactory)
    scope_type = ScopeType.GLOBAL
    scope_id = None
    enabled = True

    @factory.post_generation
    def entries(self, create, extracted, **kwargs):
        models = extracted if extracted is not None else [LlmModelFactory()]
        for i, model in enumerate(models):
            ChainEntryFactory(chain=self, position=i, model=model)


class ChainEntryFactory(factory.django.DjangoModelFactory):
    """One entry of a chain at `position` (give it: positions are the chain's order)."""

    class Meta:
        model = ChainEntry

    chain = factory.SubFactory(ChainFactory, entries=[])
    position = 0
    model = factory.SubFactory(LlmModelFactory)


class RoutingRuleFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = RoutingRule

    name = factory.Sequence(lambda n: f"rule-{n}")
    source_model = factory.SubFactory(LlmModelFactory)
    target_model = factory.SubFactory(LlmModelFactory)
    scope_type = ScopeType.GLOBAL
    enabled = True


class AliasFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Alias

    name = factory.Sequence(lambda n: f"alias-{n}")
    model = factory.SubFactory(LlmModelFactory)


class GuardrailFactory(factory.django.DjangoModelFactory):
    """A global deny guardrail on one model; no audit event."""

    class Meta:
        model = Guardrail

    name = factory.Sequence(lambda n: f"guardrail-{n}")
    model = factory.SubFactory(LlmModelFactory)
    action = "deny"
    scope_type = ScopeType.GLOBAL
    enabled = True
