from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models

from catalog.enums import Capability, Protocol, ScopeType
from catalog.fields import EncryptedTextField


class Provider(models.Model):
    name = models.CharField(max_length=64, unique=True)
    protocol = models.CharField(max_length=16, choices=Protocol.choices, default=Protocol.OPENAI)
    base_url = models.URLField(max_length=500)
    # Encrypted at rest; never rendered back (write-only in admin and API).
    api_key = EncryptedTextField(blank=True, default="")
    connect_timeout = models.FloatField(default=5.0, validators=[MinValueValidator(0.1)])
    read_timeout = models.FloatField(default=60.0, validators=[MinValueValidator(0.1)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class LlmModel(models.Model):
    """A model in the catalog. Names are unique; `provider` is the one that serves it by default."""

    name = models.CharField(max_length=128, unique=True)
    provider = models.ForeignKey(Provider, on_delete=models.PROTECT, related_name="models")
    capabilities = models.JSONField(default=list, blank=True, help_text="Subset of: " + ", ".join(Capability.values))
    input_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    output_price_per_mtok = models.DecimalField(max_digits=12, decimal_places=4, default=0)
    context_window = models.PositiveIntegerField(default=8192)
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
    name = models.CharField(max_length=128, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Application(models.Model):
    name = models.CharField(max_length=128, unique=True)
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="applications")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Agent(models.Model):
    name = models.CharField(max_length=128, unique=True)
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

    name = models.CharField(max_length=128)
    prefix = models.CharField(max_length=16, unique=True, editable=False)
    # The secret has 256 bits of entropy, so a fast hash is safe and keeps gateway lookups O(1).
    hashed_secret = models.CharField(max_length=64, unique=True, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
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


class Scoped(models.Model):
    """Abstract: a scope type and the id of its target (None for global)."""

    scope_type = models.CharField(max_length=16, choices=ScopeType.choices, default=ScopeType.GLOBAL)
    scope_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        abstract = True
