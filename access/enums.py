from django.db import models


class ThrottleScope(models.TextChoices):
    LOGIN = "login", "Sign-in (console and admin)"
    API = "api", "API token"


class ThrottleKind(models.TextChoices):
    ACCOUNT = "account", "Account"
    ADDRESS = "address", "Client address"


class Notice(models.TextChoices):
    """Console notices a user can dismiss for good (access.models.DismissedNotice)."""

    FALLBACK_SELECTION = "fallback_selection", "Fallback Chains: how an entry is chosen"
