from django.db import models


class ThrottleScope(models.TextChoices):
    LOGIN = "login", "Sign-in (console and admin)"
    API = "api", "API token"


class ThrottleKind(models.TextChoices):
    ACCOUNT = "account", "Account"
    ADDRESS = "address", "Client address"
