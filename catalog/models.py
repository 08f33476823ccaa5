import ipaddress
import re
import unicodedata

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from catalog.enums import Capability, Protocol, ScopeType
from catalog.fields import EncryptedTextField
from core.validators import validate_name

# One DNS label. Single-label hosts (docker-compose or Kubernetes service names such as "ollama")
# are fine; underscores too, since docker-compose service names may use them.
_HOST_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def _host_problem(host: str) -> str | None:
    if not host:
        return "Base URL needs a host name after the scheme."
    if host.startswith("["):
        try:
            ipaddress.IPv6Address(host[1:-1] if host.endswith("]") else "")
        except ValueError:
            return f"“{host}” is not a valid IPv6 address."
        return None
    name = host[:-1] if host.endswith(".") else host
    if not name or len(name) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in name.split(".")):
        return f"“{host}” is not a valid host name."
    return None


def base_url_problem(value: str) -> str | None:
    """Why `value` is not a usable provider base URL, or None when it is.

    http(s) only, any valid host name (single labels such as "ollama" included), an optional
    port 1..65535 and a path; no credentials, query, fragment, whitespace or control characters.
    """
    if any(c.isspace() or unicodedata.category(c) in ("Cc", "Cf") for c in value):
        return "Base URL cannot contain spaces or control characters."
    scheme, sep, rest = value.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        return f"“{value}” is not a valid http(s) URL."
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "?" in rest or "#" in rest:
        return "Base URL cannot have a query string or fragment; the gateway appends the endpoint path to it."
    if "@" in authority:
        return "Base URL cannot contain credentials (user:password@); set the provider's API key instead."
    if authority.startswith("[") and "]" in authority:
        end = authority.index("]") + 1
        host, port_part = authority[:end], authority[end:]
    else:
        host, colon, port = authority.partition(":")
        port_part = colon + port
    if problem := _host_problem(host):
        return problem
    if port_part:
        port = port_part[1:]
        if not port_part.startswith(":") or not (port.isascii() and port.isdigit()):
            return f"Port must be a number between 1 and 65535 (got “{port_part.lstrip(':')}”)."
        if not 1 <= int(port) <= 65535:
            return f"Port must be between 1 and 65535 (got {int(port)})."
    return None


def validate_base_url(value: str) -> None:
    """Model field validator (the admin form) for base_url_problem."""
    if problem := base_url_problem(value):
        raise ValidationError(problem, code="invalid")


class Provider(models.Model):
    # No "/": circuits are keyed "provider/model".
    name = models.CharField(max_length=64, unique=True, validators=[validate_name])
    protocol = models.CharField(max_length=16, choices=Protocol.choices, default=Protocol.OPENAI)
    base_url = models.CharField(max_length=500, validators=[validate_base_url])
    # Encrypted at rest; never rendered back (write-only in admin and API).
    api_key = EncryptedTextField(blank=True, default="")
    connect_timeout = models.FloatField(default=5.0, validators=[MinValueValidator(0.1)])
    read_timeout = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)])
    # Resilient chains' stream timeouts for this provider; None = the chain's policy (global default).
    first_token_timeout_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.5)])
    idle_timeout_seconds = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0.5)])
    # Azure OpenAI only: the `api-version` query parameter of every call (required there), and catalog model
    # name → deployment name (a model not listed is called by its own name).
    api_version = models.CharField(max_length=32, blank=True, default="", help_text="Azure OpenAI: e.g. 2024-10-21.")
    deployments = models.JSONField(
        default=dict,
        blank=True,
        help_text='Azure OpenAI: catalog model name → deployment name, e.g. {"gpt-4o": "gpt-4o-prod"}.',
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LlmModel(models.Model):
    """A model in the catalog. Names are unique; `provider` is the one that serves it by default."""

    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="models")
    capabilities = models.JSONField(default=list, blank=True, help_text="Subset of: " + ", ".join(Capability.values))
    input_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    output_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    context_window = models.PositiveIntegerField(default=8192)
    # What the gateway sends as `max_tokens` to an upstream that requires it (Anthropic) when the client omits it.
    max_output_tokens = models.PositiveIntegerField(
        default=4096,
        validators=[MinValueValidator(1)],
        help_text="Sent as max_tokens to upstreams that require it (Anthropic) when the client omits it.",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name = "model"
        db_table = "catalog_model"

    def __str__(self) -> str:
        return self.name

    @property
    def blended_price(self) -> float:
        """Price of 1M input + 1M output tokens, for comparing models' cost."""
        return float(self.input_price_per_mtok + self.output_price_per_mtok)


class Team(models.Model):
    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Application(models.Model):
    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="applications")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    name = models.CharField(max_length=128, unique=True, validators=[validate_name])
    application = models.ForeignKey(
        Application, null=True, blank=True, on_delete=models.SET_NULL, related_name="agents"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """A gateway key. Only a SHA-256 of the secret is stored; the prefix identifies it in lists."""

    name = models.CharField(max_length=128, validators=[validate_name])
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    # The secret has 256 bits of entropy, so a fast hash is safe and keeps gateway lookups O(1).
    hashed_secret = models.CharField(max_length=64, unique=True, editable=False)
    # PROTECT: keys are revoked, never deleted (request logs name them); user_delete refuses such a user first.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="api_keys")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys")
    application = models.ForeignKey(
        Application, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys"
    )
    agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys")
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class ConsoleToken(models.Model):
    """A REST API token for scripts. Like ApiKey, only a SHA-256 of the secret is stored."""

    # CASCADE: a deleted user's tokens go with them; user_delete lists them in its audit event.
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="console_tokens")
    name = models.CharField(max_length=128, validators=[validate_name])
    # Unique: `manage.py revoke_api_token PREFIX` looks a token up by it.
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    # Unique: every authenticated API request looks its token up by this hash.
    hashed_secret = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Written at most once a minute per token, so authentication rarely writes.
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name = "console API token"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None


class Scoped(models.Model):
    """Abstract: a scope type and the id of its target (None for global)."""

    scope_type = models.CharField(max_length=16, choices=ScopeType.choices, default=ScopeType.GLOBAL)
    scope_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        abstract = True
