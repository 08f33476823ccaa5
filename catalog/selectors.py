"""Reads of catalog objects."""

from collections.abc import Iterable

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet

from catalog.models import Agent, ApiKey, Application, ConsoleToken, LlmModel, Provider, Team


def provider_list() -> QuerySet[Provider]:
    """Providers by name."""
    return Provider.objects.order_by("name", "id")


def llm_model_list() -> QuerySet[LlmModel]:
    """Models by name, with their default provider."""
    return LlmModel.objects.select_related("provider").order_by("name", "id")


def team_list() -> QuerySet[Team]:
    return Team.objects.order_by("name", "id")


def application_list() -> QuerySet[Application]:
    return Application.objects.select_related("team").order_by("name", "id")


def agent_list() -> QuerySet[Agent]:
    return Agent.objects.select_related("application").order_by("name", "id")


def api_key_list() -> QuerySet[ApiKey]:
    """Gateway keys newest first, revoked ones included."""
    return ApiKey.objects.select_related("user", "team", "application", "agent").order_by("-created_at", "-id")


def providers_deploying(*, model_name: str) -> list[Provider]:
    """Providers whose Azure deployments map `model_name`, by name.

    Read in Python, not with a JSON key lookup: SQLite's JSON path for a key holding `"` matches nothing, so a
    model named `gpt-4o "eu"` lost its deployment on a rename and could be deleted from under it. Providers
    with deployments are few."""
    deploying = Provider.objects.exclude(deployments={}).order_by("name")
    return [provider for provider in deploying if model_name in (provider.deployments or {})]


def provider_protocols() -> dict[str, str]:
    """Provider name → protocol, for the console's protocol badges (one query)."""
    return dict(Provider.objects.values_list("name", "protocol"))


def models_of_provider(*, provider: Provider) -> list[str]:
    """Names of the catalog models whose default provider is `provider`."""
    return sorted(LlmModel.objects.filter(provider=provider).values_list("name", flat=True))


def api_keys_of_user(*, user: AbstractBaseUser) -> list[str]:
    """Every gateway key the user owns, revoked ones included, as "name (prefix…)"."""
    return [str(key) for key in ApiKey.objects.filter(user_id=user.pk).order_by("created_at", "id")]


def api_keys_usable_count(*, users: Iterable[AbstractBaseUser]) -> int:
    """How many unrevoked gateway keys these users own: the keys that stop while their owners are inactive."""
    return ApiKey.objects.filter(user__in=list(users), revoked_at=None).count()


def user_by_username(*, username: str) -> AbstractBaseUser | None:
    """The user with this username, or None."""
    return get_user_model()._default_manager.filter(username=username).first()


def console_token_live(*, secret_hash: str) -> ConsoleToken | None:
    """The console API token with this SHA-256 if it still works (not revoked, owner active), user loaded.

    The one rule of a valid token: the API's authentication (which adds failure throttling and the last-used
    stamp) and the gateway's /metrics check (which cannot load the throttling) both ask it.
    """
    token = ConsoleToken.objects.select_related("user").filter(hashed_secret=secret_hash).first()
    if token is None or token.revoked_at is not None or not token.user.is_active:
        return None
    return token
